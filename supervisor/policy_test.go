package supervisor

import (
	"slices"
	"testing"
)

// base is the default configuration with one fresh current Chrome.
func base() view {
	return view{capacity: 6, recycleJobs: 20, exitAfter: 80, lead: 6, hasCurrent: true}
}

func TestAdmit(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*view)
		want admission
	}{
		{"fresh chrome", func(v *view) {}, admitNow},
		{"one slot left", func(v *view) { v.busy = 5 }, admitNow},
		{"all slots busy", func(v *view) { v.busy = 6 }, waitSlot},
		{"busy counts across chromes, beyond capacity too", func(v *view) { v.busy = 7 }, waitSlot},
		{"no chrome yet", func(v *view) { v.hasCurrent = false; v.booting = true }, waitChrome},
		{"chrome handed out its last start", func(v *view) { v.currentStarts = 20 }, waitChrome},
		{"chrome one start left", func(v *view) { v.currentStarts = 19 }, admitNow},
		{"process budget used up", func(v *view) { v.processStarts = 80; v.currentStarts = 20 }, refuseExitDue},
		{"process budget used up, slots free, chrome has starts", func(v *view) { v.processStarts = 80; v.currentStarts = 5 }, refuseExitDue},
		{"exit due wins over busy", func(v *view) { v.processStarts = 80; v.busy = 6 }, refuseExitDue},
		{"stopping wins over everything", func(v *view) { v.stopping = true; v.processStarts = 80 }, refuseStopping},
		{"recycle disabled never exhausts", func(v *view) { v.recycleJobs = 0; v.currentStarts = 1000 }, admitNow},
		{"exit disabled never refuses", func(v *view) { v.exitAfter = 0; v.processStarts = 1 << 30 }, admitNow},
		{"capacity one", func(v *view) { v.capacity = 1; v.busy = 1 }, waitSlot},
		{"chrome gone, not yet known to the actor", func(v *view) { v.currentGone = true }, waitChrome},
		{"chrome gone, all slots busy", func(v *view) { v.currentGone = true; v.busy = 6 }, waitSlot},
		{"chrome failed its latest health check", func(v *view) { v.suspect = true }, waitChrome},
		{"suspect chrome, all slots busy", func(v *view) { v.suspect = true; v.busy = 6 }, waitSlot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := base()
			tt.mod(&v)
			if got := admit(v); got != tt.want {
				t.Fatalf("admit(%+v) = %v, want %v", v, got, tt.want)
			}
		})
	}
}

func TestForfeit(t *testing.T) {
	tests := []struct {
		name      string
		mod       func(*view)
		onCurrent bool
		want      bool
	}{
		{"process has starts left", func(v *view) { v.processStarts = 79; v.hasCurrent = false }, false, false},
		{"last start out, current retired", func(v *view) { v.processStarts = 80; v.hasCurrent = false }, false, true},
		{"last start out, current spent", func(v *view) { v.processStarts = 80; v.currentStarts = 20 }, false, true},
		{"last start out, current can take it", func(v *view) { v.processStarts = 80; v.currentStarts = 19 }, false, false},
		{"on the current Chrome, which takes it back", func(v *view) { v.processStarts = 80; v.currentStarts = 20 }, true, false},
		{"exit disabled", func(v *view) { v.exitAfter = 0; v.processStarts = 1 << 30; v.hasCurrent = false }, false, false},
		{"last start out, another lane's chrome can take it", func(v *view) { v.processStarts = 80; v.hasCurrent = false; v.othersLeft = 1 }, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := base()
			tt.mod(&v)
			if got := forfeit(v, tt.onCurrent); got != tt.want {
				t.Fatalf("forfeit(%+v, %v) = %v, want %v", v, tt.onCurrent, got, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*view)
		want action
	}{
		{"nothing to do on a fresh chrome", func(v *view) {}, action{actNone, ""}},
		{"first boot", func(v *view) { v.hasCurrent = false }, action{actBoot, reasonInitial}},
		{"first boot already running", func(v *view) { v.hasCurrent = false; v.booting = true }, action{actNone, ""}},
		{"standby ready without current is promoted", func(v *view) { v.hasCurrent = false; v.standbyReady = true }, action{actPromote, ""}},
		{"held: the first chrome boots", func(v *view) { v.hasCurrent = false; v.held = true }, action{actBoot, reasonInitial}},
		{"held: the booted first chrome waits for Release", func(v *view) { v.hasCurrent = false; v.held = true; v.standbyReady = true }, action{actNone, ""}},
		{"held and stopping: the waiting chrome goes", func(v *view) { v.hasCurrent = false; v.held = true; v.standbyReady = true; v.stopping = true }, action{actRetireStandby, reasonStop}},

		{"before the lead: no preboot", func(v *view) { v.currentStarts = 13; v.processStarts = 13 }, action{actNone, ""}},
		{"at the lead: preboot", func(v *view) { v.currentStarts = 14; v.processStarts = 14 }, action{actBoot, reasonPreboot}},
		{"preboot already booting", func(v *view) { v.currentStarts = 15; v.processStarts = 15; v.booting = true }, action{actNone, ""}},
		{"preboot ready, current still has starts", func(v *view) { v.currentStarts = 17; v.processStarts = 17; v.standbyReady = true }, action{actNone, ""}},
		{"lead zero boots only at the last start", func(v *view) { v.lead = 0; v.currentStarts = 19; v.processStarts = 19 }, action{actNone, ""}},
		{"lead zero, exhausted: retire first", func(v *view) { v.lead = 0; v.currentStarts = 20; v.processStarts = 20 }, action{actRetireCurrent, reasonJobs}},

		{"exhausted with standby: retire current", func(v *view) { v.currentStarts = 20; v.processStarts = 20; v.standbyReady = true }, action{actRetireCurrent, reasonJobs}},
		{"exhausted without standby: retire current", func(v *view) { v.currentStarts = 20; v.processStarts = 20; v.booting = true }, action{actRetireCurrent, reasonJobs}},
		{"after retire, standby takes over", func(v *view) { v.hasCurrent = false; v.processStarts = 20; v.standbyReady = true }, action{actPromote, ""}},
		{"after retire, no standby and no boot: boot", func(v *view) { v.hasCurrent = false; v.processStarts = 20 }, action{actBoot, reasonInitial}},

		{"last chrome of the process: no preboot at the lead", func(v *view) { v.currentStarts = 14; v.processStarts = 74 }, action{actNone, ""}},
		{"last chrome: no preboot one start before the end", func(v *view) { v.currentStarts = 19; v.processStarts = 79 }, action{actNone, ""}},
		{"process needs one more start than chrome has: preboot", func(v *view) { v.currentStarts = 14; v.processStarts = 73 }, action{actBoot, reasonPreboot}},
		{"exit due retires an idle current", func(v *view) { v.currentStarts = 20; v.processStarts = 80 }, action{actRetireCurrent, reasonExit}},
		{"exit due keeps a busy current until idle", func(v *view) { v.currentStarts = 20; v.processStarts = 80; v.currentBusy = 3; v.busy = 3 }, action{actNone, ""}},
		{"exit due mid chrome retires current", func(v *view) { v.exitAfter = 30; v.currentStarts = 10; v.processStarts = 30 }, action{actRetireCurrent, reasonExit}},
		{"exit due drops a standby", func(v *view) { v.hasCurrent = false; v.processStarts = 80; v.standbyReady = true }, action{actRetireStandby, reasonExit}},
		{"exit due, nothing left", func(v *view) { v.hasCurrent = false; v.processStarts = 80 }, action{actNone, ""}},

		{"memory over: boot replacement", func(v *view) { v.overMemory = true; v.currentStarts = 3 }, action{actBoot, reasonMemory}},
		{"memory over, replacement booting: wait", func(v *view) { v.overMemory = true; v.booting = true }, action{actNone, ""}},
		{"memory over, replacement ready: retire", func(v *view) { v.overMemory = true; v.standbyReady = true }, action{actRetireCurrent, reasonMemory}},
		{"memory over on the last chrome near exit: no new chrome", func(v *view) { v.overMemory = true; v.processStarts = 80 }, action{actRetireCurrent, reasonExit}},
		{"suspect, replacement ready: retire", func(v *view) { v.suspect = true; v.currentStarts = 15; v.processStarts = 15; v.standbyReady = true }, action{actRetireCurrent, reasonSuspect}},
		{"suspect, replacement booting: wait", func(v *view) { v.suspect = true; v.currentStarts = 15; v.processStarts = 15; v.booting = true }, action{actNone, ""}},
		{"suspect, no replacement: no boot for it", func(v *view) { v.suspect = true; v.currentStarts = 3; v.processStarts = 3 }, action{actNone, ""}},
		{"suspect on the last chrome near exit: no new chrome", func(v *view) { v.suspect = true; v.currentStarts = 20; v.processStarts = 80 }, action{actRetireCurrent, reasonExit}},
		{"memory over with recycling off", func(v *view) { v.recycleJobs = 0; v.overMemory = true; v.currentStarts = 500 }, action{actBoot, reasonMemory}},

		// Lanes (Config.SessionsPerChrome): othersLeft counts what the
		// other lanes' Chromes, and replacements booting for them, can
		// still start.
		{"lane: others take what is left: no preboot", func(v *view) { v.currentStarts = 19; v.processStarts = 40; v.othersLeft = 39 }, action{actNone, ""}},
		{"lane: others short of one start: preboot", func(v *view) { v.currentStarts = 19; v.processStarts = 40; v.othersLeft = 38 }, action{actBoot, reasonPreboot}},
		{"lane: retired on its count, others take what is left: stays empty", func(v *view) { v.hasCurrent = false; v.processStarts = 40; v.othersLeft = 40 }, action{actNone, ""}},
		{"lane: retired on its count, others short: boot", func(v *view) { v.hasCurrent = false; v.processStarts = 40; v.othersLeft = 39 }, action{actBoot, reasonInitial}},
		{"lane: first or lost chrome: boot whatever the others have", func(v *view) { v.hasCurrent = false; v.refill = true; v.processStarts = 40; v.othersLeft = 100 }, action{actBoot, reasonInitial}},

		{"recycle off, exit off: never act", func(v *view) {
			v.recycleJobs = 0
			v.exitAfter = 0
			v.currentStarts = 1 << 20
			v.processStarts = 1 << 20
		}, action{actNone, ""}},
		{"recycle off, exit on: no preboot", func(v *view) { v.recycleJobs = 0; v.currentStarts = 79; v.processStarts = 79 }, action{actNone, ""}},
		{"exit off, recycle on: preboot", func(v *view) { v.exitAfter = 0; v.currentStarts = 14; v.processStarts = 1000 }, action{actBoot, reasonPreboot}},

		{"stopping drops standby first", func(v *view) { v.stopping = true; v.standbyReady = true }, action{actRetireStandby, reasonStop}},
		{"stopping retires current", func(v *view) { v.stopping = true }, action{actRetireCurrent, reasonStop}},
		{"stopping never boots", func(v *view) { v.stopping = true; v.hasCurrent = false }, action{actNone, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := base()
			tt.mod(&v)
			if got := decide(v); got != tt.want {
				t.Fatalf("decide(%+v) = %v/%q, want %v/%q", v, got.kind, got.reason, tt.want.kind, tt.want.reason)
			}
		})
	}
}

// TestPolicySimulation drives admit and decide through a whole process life
// with instant boots and jobs, and checks the counts the issue promises:
// 80 jobs at 20 per Chrome take exactly 4 boots, and no Chrome ever gets
// more than its 20 starts.
func TestPolicySimulation(t *testing.T) {
	tests := []struct {
		name                          string
		capacity, recycle, exit, lead int
		wantBoots, wantJobs           int
	}{
		{"defaults", 6, 20, 80, 6, 4, 80},
		{"issue integration shape", 6, 5, 12, 6, 3, 12},
		{"exit not a multiple of recycle", 6, 20, 50, 6, 3, 50},
		{"lead zero", 6, 20, 80, 0, 4, 80},
		{"lead beyond recycle", 6, 4, 16, 10, 4, 16},
		{"capacity one", 1, 3, 10, 1, 4, 10},
		{"recycle off", 6, 0, 40, 6, 1, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := view{capacity: tt.capacity, recycleJobs: tt.recycle, exitAfter: tt.exit, lead: tt.lead}
			boots, jobs := 0, 0
			var standbyStarts int // starts of the booted standby, always 0
			for step := 0; step < 10000; step++ {
				// Apply policy steps until quiet; boots complete at once.
				for i := 0; ; i++ {
					if i > 10 {
						t.Fatalf("policy does not settle at %+v", v)
					}
					a := decide(v)
					if a.kind == actNone {
						break
					}
					switch a.kind {
					case actBoot:
						boots++
						v.standbyReady = true
						standbyStarts = 0
					case actPromote:
						v.hasCurrent, v.standbyReady = true, false
						v.currentStarts = standbyStarts
					case actRetireCurrent:
						v.hasCurrent = false
						v.currentStarts = 0
					case actRetireStandby:
						v.standbyReady = false
					}
				}
				switch admit(v) {
				case admitNow:
					v.currentStarts++
					v.processStarts++
					jobs++ // the job runs and finishes at once
					if tt.recycle > 0 && v.currentStarts > tt.recycle {
						t.Fatalf("chrome got %d starts, limit %d", v.currentStarts, tt.recycle)
					}
				case refuseExitDue:
					if boots != tt.wantBoots || jobs != tt.wantJobs {
						t.Fatalf("boots=%d jobs=%d, want %d and %d", boots, jobs, tt.wantBoots, tt.wantJobs)
					}
					return
				default:
					t.Fatalf("stuck at %+v: %v", v, admit(v))
				}
			}
			t.Fatalf("never reached exit: boots=%d jobs=%d", boots, jobs)
		})
	}
}

func TestExitNear(t *testing.T) {
	for _, tt := range []struct {
		exitAfter, lead, starts int
		want                    bool
	}{
		{80, 6, 73, false},
		{80, 6, 74, true},
		{80, 6, 80, true},
		{80, 0, 79, false},
		{80, 0, 80, true},
		{5, 6, 0, true}, // a life shorter than the lead is near from the start
		{0, 6, 1000, false},
	} {
		v := view{exitAfter: tt.exitAfter, lead: tt.lead, processStarts: tt.starts}
		if got := v.exitNear(); got != tt.want {
			t.Errorf("exit after %d, lead %d, %d starts: exitNear = %v, want %v", tt.exitAfter, tt.lead, tt.starts, got, tt.want)
		}
	}
}

func TestNewLanes(t *testing.T) {
	for _, tc := range []struct {
		capacity, perChrome, lead int
		want                      []int // capacity, lead of each lane
	}{
		{6, 1, 6, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{6, 6, 6, []int{6, 6}},
		{6, 4, 6, []int{3, 3, 3, 3}}, // two Chromes of 3, not 4 and 2
		{7, 3, 6, []int{3, 3, 2, 2, 2, 2}},
		{6, 10, 6, []int{6, 6}}, // more than the capacity: one Chrome
		{6, 1, 0, []int{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}},
	} {
		var got []int
		for _, l := range newLanes(tc.capacity, tc.perChrome, tc.lead) {
			got = append(got, l.capacity, l.lead)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("newLanes(%d, %d, %d) = %v, want %v", tc.capacity, tc.perChrome, tc.lead, got, tc.want)
		}
		if n := len(Lanes(tc.capacity, tc.perChrome)); n != len(tc.want)/2 {
			t.Errorf("Lanes(%d, %d) has %d Chromes, want %d", tc.capacity, tc.perChrome, n, len(tc.want)/2)
		}
	}
}
