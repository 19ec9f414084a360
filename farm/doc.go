// Package farm holds browserfarm's roles: the Producer, which assigns queued
// jobs to consumer nodes under farm-wide per-host politeness, rescues the
// jobs of lost nodes and sizes the fleet; the Consumer, one node that renders
// its jobs through a recycling Chrome supervisor; and the HTTP side (JSON
// API, dashboard, metrics). Each role is an actor with Run(ctx) that the
// command wires into one oklog/run group; every dependency is passed in.
package farm
