package autoscale

import (
	"strings"
	"testing"
)

func newTestProtector(t *testing.T, asg *fakeASG, md *fakeIMDS, region string) *InstanceProtector {
	t.Helper()
	log, _ := observed(t)
	cfg := ProtectorConfig{AWSConfig: testAWSConfig(asg.srv.URL), IMDSEndpoint: md.srv.URL}
	p, err := NewInstanceProtectorWithConfig(staticAWS(region), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInstanceProtector(t *testing.T) {
	asg := newFakeASG(t)
	md := newFakeIMDS(t)
	p := newTestProtector(t, asg, md, "us-west-2")
	ctx := t.Context()

	if _, known := p.Protected(); known {
		t.Fatal("protection known before any call")
	}
	// busy, busy again (no call), idle, idle again (no call), busy.
	for _, busy := range []bool{true, true, false, false, true} {
		if err := p.SetBusy(ctx, busy); err != nil {
			t.Fatalf("SetBusy(%t): %v", busy, err)
		}
		if prot, known := p.Protected(); !known || prot != busy {
			t.Fatalf("after SetBusy(%t): Protected() = %t, %t", busy, prot, known)
		}
	}
	calls := asg.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d SetInstanceProtection calls, want 3 (only on change)", len(calls))
	}
	for i, want := range []string{"true", "false", "true"} {
		c := calls[i]
		for k, v := range map[string]string{
			"Action": "SetInstanceProtection", "Version": "2011-01-01", "AutoScalingGroupName": testGroup,
			"InstanceIds.member.1": testInstanceID, "ProtectedFromScaleIn": want,
		} {
			if got := c.get(k); got != v {
				t.Errorf("call %d: %s = %q, want %q", i, k, got, v)
			}
		}
		if len(c.form) != 5 {
			t.Errorf("call %d sent unexpected parameters: %v", i, c.form)
		}
		if !strings.Contains(c.auth, "/us-west-2/autoscaling/") {
			t.Errorf("call %d Authorization = %q", i, c.auth)
		}
	}
	// The instance id was learned once, through IMDSv2.
	tokens, gets, rejected := md.counts()
	if tokens != 1 || gets != 1 || rejected != 0 {
		t.Errorf("IMDS: %d token PUTs, %d GETs, %d rejected; want 1, 1, 0", tokens, gets, rejected)
	}
	if id, err := p.InstanceID(ctx); err != nil || id != testInstanceID {
		t.Errorf("InstanceID() = %q, %v", id, err)
	}
}

func TestInstanceProtectorErrors(t *testing.T) {
	t.Run("AWS error is returned and retried on the next call", func(t *testing.T) {
		asg := newFakeASG(t, asgReply{400, "ValidationError", "The instance i-0123456789abcdef0 is not part of Auto Scaling group farm-consumers."})
		md := newFakeIMDS(t)
		p := newTestProtector(t, asg, md, "us-west-2")
		err := p.SetBusy(t.Context(), true)
		if err == nil || !strings.Contains(err.Error(), "ValidationError") || !strings.Contains(err.Error(), testInstanceID) {
			t.Fatalf("SetBusy = %v, want a ValidationError naming the instance", err)
		}
		if _, known := p.Protected(); known {
			t.Fatal("failed call marked as applied")
		}
		if err := p.SetBusy(t.Context(), true); err != nil {
			t.Fatalf("second SetBusy: %v", err)
		}
		if n := len(asg.Calls()); n != 2 {
			t.Fatalf("%d calls, want 2 (the same state is retried after a failure)", n)
		}
	})
	t.Run("IMDS refusing tokens is an error, with no fallback to IMDSv1", func(t *testing.T) {
		asg := newFakeASG(t)
		md := newFakeIMDS(t)
		md.refuseTokens = true
		p := newTestProtector(t, asg, md, "us-west-2")
		err := p.SetBusy(t.Context(), true)
		if err == nil || !strings.Contains(err.Error(), "IMDSv2") {
			t.Fatalf("SetBusy = %v, want an IMDSv2 error", err)
		}
		if _, gets, rejected := md.counts(); gets != 0 || rejected != 0 {
			t.Errorf("metadata read without a token: %d GETs, %d rejected", gets, rejected)
		}
		if n := len(asg.Calls()); n != 0 {
			t.Errorf("%d Auto Scaling calls without an instance id", n)
		}
	})
	t.Run("region from instance metadata", func(t *testing.T) {
		asg := newFakeASG(t)
		md := newFakeIMDS(t)
		p := newTestProtector(t, asg, md, "")
		if err := p.SetBusy(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		calls := asg.Calls()
		if len(calls) != 1 || !strings.Contains(calls[0].auth, "/eu-west-3/autoscaling/") || calls[0].get("ProtectedFromScaleIn") != "false" {
			t.Fatalf("calls = %+v", calls)
		}
	})
	t.Run("configured instance id skips IMDS", func(t *testing.T) {
		asg := newFakeASG(t)
		md := newFakeIMDS(t)
		log, _ := observed(t)
		p, err := NewInstanceProtectorWithConfig(staticAWS("us-west-2"), ProtectorConfig{
			AWSConfig: testAWSConfig(asg.srv.URL), IMDSEndpoint: md.srv.URL, InstanceID: "i-fixed",
		}, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetBusy(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		if tokens, gets, _ := md.counts(); tokens+gets != 0 {
			t.Errorf("IMDS used although the instance id was configured")
		}
		if c := asg.Calls(); len(c) != 1 || c[0].get("InstanceIds.member.1") != "i-fixed" {
			t.Errorf("calls = %+v", c)
		}
	})
	t.Run("group name required", func(t *testing.T) {
		if _, err := NewInstanceProtectorWithConfig(staticAWS("us-west-2"), ProtectorConfig{}, nil); err == nil {
			t.Fatal("accepted an empty group name")
		}
	})
}
