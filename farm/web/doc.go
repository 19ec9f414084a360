// Package web is the producer's HTTP side: the operator's dashboard (node
// load, queue depth, throughput and the Chrome memory sawtooth of recycling,
// recent failures by error class, job details), served from assets embedded
// in the binary with the uPlot chart library vendored; the JSON API (read
// endpoints open, mutating ones behind a bearer token and only on the leader);
// the Prometheus metrics, queue-derived series read from the database at
// scrape time so that standby producers serve them too; and the Recorder, the
// leader's actor that keeps the load samples behind the charts with a bounded
// retention. All SQL it needs lives in package jobqueue.
package web
