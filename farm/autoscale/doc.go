// Package autoscale sizes the consumer fleet: the producer turns the job
// backlog (pending + queued + processing, so running work is never
// under-counted) into a desired node count bounded by a minimum and maximum,
// scaling out at once and scaling in only after a cooldown and only by idle
// nodes (Compute). A Reconciler runs that computation on a timer and hands the
// number to a Driver: "none" only reports it (for Kubernetes HPA/KEDA), "aws"
// sets the desired capacity of an EC2 Auto Scaling group, "exec" runs an
// operator's command. On EC2 each consumer keeps instance scale-in protection
// on while it has work (InstanceProtector), so the group only terminates idle
// instances. Simulate replays a day's workload against the same code to
// compare node-hours with a fixed fleet sized for the peak.
package autoscale
