package jobqueue

// NOTIFY channels and payloads. Notifications are wake-up hints, never the
// source of truth: a receiver re-reads the queue when woken and also polls at
// a slow interval, so a notification lost while a listener reconnects costs
// latency, not correctness.
const (
	// ChannelProducer wakes the producer. Payloads: PayloadSubmitted,
	// PayloadSlots.
	ChannelProducer = "browserfarm_producer"
	// PayloadSubmitted: pending jobs appeared (Enqueue, followed links,
	// Retry, a released or rescued job).
	PayloadSubmitted = "submitted"
	// PayloadSlots: a node has free capacity (a job completed while jobs
	// were pending, a job failed or was canceled, a node registered or
	// released its queue).
	PayloadSlots = "slots"

	// NodeChannelPrefix + node id is the channel that wakes one node (see
	// NodeChannel). Payload: the decimal number of jobs just assigned to it.
	NodeChannelPrefix = "browserfarm_node."

	// PayloadReconnected is delivered by a Listener (never sent by
	// PostgreSQL) after it re-established its connection: notifications may
	// have been missed, so the receiver should look at the queue.
	PayloadReconnected = "reconnected"
)

// NodeChannel is the NOTIFY channel that wakes the node with this id.
func NodeChannel(nodeID string) string { return NodeChannelPrefix + nodeID }
