package main

import (
	"testing"

	"github.com/browserfarm/browserfarm/jobqueue"
)

func TestAssignPolicyDefault(t *testing.T) {
	for _, tt := range []struct {
		assign, driver string
		want           jobqueue.AssignPolicy
		wantErr        bool
	}{
		{"auto", "none", jobqueue.AssignSpread, false},
		{"auto", "aws", jobqueue.AssignPack, false},
		{"auto", "exec", jobqueue.AssignPack, false},
		{"spread", "aws", jobqueue.AssignSpread, false},
		{"pack", "none", jobqueue.AssignPack, false},
		{"", "none", "", true},
		{"busiest", "none", "", true},
	} {
		po := producerOptions{assign: tt.assign, scaleDriver: tt.driver}
		got, err := po.assignPolicy()
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("--assign %q --autoscale %s: %q, %v; want %q, error %v", tt.assign, tt.driver, got, err, tt.want, tt.wantErr)
		}
	}
}
