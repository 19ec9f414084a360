package main

import (
	"io"
	"testing"
)

func TestFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-lifecycle-rounds", "0"},
		{"-lifecycle-jobs", "0"},
		{"-history-jobs", "-1"},
		{"-retained", "x"},
		{"-retained", "0,1000", "-history-jobs", "1,2,3"},
		{"-history-jobs", "x"},
		{"-pg-set", "autovacuum_naptime"},
		{"-pg-set", "=10s"},
	} {
		if code := realMain(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
