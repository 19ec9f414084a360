package jobqueue

// pssRange is the Chrome PSS range a heartbeat widens the node's row with. A
// load that carries no range (both ends 0, as from an operator's Heartbeat or
// an older node) stands for its ChromePSSBytes alone; the ends are ordered
// and widened to hold ChromePSSBytes, so the stored range always contains the
// line the dashboard draws through it.
func (l NodeLoad) pssRange() (lo, hi int64) {
	if l.ChromePSSMinBytes == 0 && l.ChromePSSMaxBytes == 0 {
		return l.ChromePSSBytes, l.ChromePSSBytes
	}
	lo, hi = min(l.ChromePSSMinBytes, l.ChromePSSMaxBytes), max(l.ChromePSSMinBytes, l.ChromePSSMaxBytes)
	return min(lo, l.ChromePSSBytes), max(hi, l.ChromePSSBytes)
}
