package jobspec

import "fmt"

// DefaultScrollWaitMS is a scroll action's ms when the spec leaves it 0:
// the longest wait after each scroll for the page to grow.
const DefaultScrollWaitMS = 1000

// NetworkIdleQuietMS is how long no request may be in flight before
// wait.network_idle holds: Chrome's networkIdle lifecycle event.
const NetworkIdleQuietMS = 500

// ActionPauseMS is the time an action of the spec spends waiting for
// certain, whatever the page does: a wait without a selector pauses its
// ms; a click pauses its ms after each of its times (0 means 1). A scroll's
// ms only bounds its wait (it ends as soon as the page grows), and a wait
// with a selector ends when the element appears: neither counts.
func ActionPauseMS(typ, selector string, times, ms int) int {
	switch {
	case typ == ActionWait && selector == "":
		return ms
	case typ == ActionClick:
		return max(times, 1) * ms
	}
	return 0
}

// CheckPauses is the rule that a job's fixed pauses leave time for the
// rest of its render: the 500 ms of quiet of wait.network_idle, then each
// action's ActionPauseMS (pauses, in the order of the actions), must add
// up to less than its timeout (timeoutMS; 0 means DefaultTimeoutMS), or
// every attempt of the job would time out. It returns nil, or the index of
// the action at which they reach the timeout (-1: the wait) and why; the
// caller names the field.
func CheckPauses(timeoutMS int, networkIdle bool, pauses []int) (int, error) {
	if timeoutMS == 0 {
		timeoutMS = DefaultTimeoutMS
	}
	total := 0
	if networkIdle {
		total = NetworkIdleQuietMS
		if total >= timeoutMS {
			return -1, fmt.Errorf("network_idle needs %d ms without a request, not less than the job's timeout of %d ms", total, timeoutMS)
		}
	}
	for i, p := range pauses {
		total += p
		if p > 0 && total >= timeoutMS {
			return i, fmt.Errorf("the job's fixed pauses add up to %d ms by this action, not less than its timeout of %d ms (timeout_ms, %d when absent): the job would time out on every attempt",
				total, timeoutMS, DefaultTimeoutMS)
		}
	}
	return 0, nil
}
