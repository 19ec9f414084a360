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

	// ChannelAssigned carries, after every commit that assigned jobs, the
	// ids of the nodes that got them, space-separated (node ids hold no
	// space), at most assignedPerNotify to a notification. Producers LISTEN
	// on it and wake those nodes' HTTP long-polls (farm/wake), so that a
	// fleet need not LISTEN at all: PostgreSQL 15 signals every listening
	// backend of the database on each notifying commit, whatever the
	// channel, and a thousand listening nodes make every commit wake a
	// thousand server processes.
	ChannelAssigned = "browserfarm_assigned"

	// PayloadReconnected is delivered by a Listener (never sent by
	// PostgreSQL) after it re-established its connection: notifications may
	// have been missed, so the receiver should look at the queue.
	PayloadReconnected = "reconnected"
)

// assignedPerNotify is how many node ids one ChannelAssigned notification
// carries: that many of the longest ids and their separators stay under
// PostgreSQL's 8,000-byte payload limit, which the declaration after it
// holds at compile time (a negative constant does not convert to uint).
const assignedPerNotify = 150

const _ = uint(7999 - assignedPerNotify*(MaxNodeIDLength+1))

// NodeChannel is the NOTIFY channel that wakes the node with this id.
func NodeChannel(nodeID string) string { return NodeChannelPrefix + nodeID }
