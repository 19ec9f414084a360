package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/browserfarm/browserfarm/farm"
)

// parseHostRule parses one override as given on the command line:
// "HOST=MAX/INTERVAL", e.g. "shop.example.com=2/500ms", ".example.com=4/0",
// "api.example.com=1" (interval 0), "slow.example.com=off/2s" or
// "slow.example.com=/2s" (no concurrency limit). MAX follows the numeric
// flags' rule: 0 is refused (it would not mean "none at once"), off is no
// limit.
func parseHostRule(s string) (string, farm.HostPolicy, error) {
	host, spec, ok := strings.Cut(s, "=")
	host = strings.TrimSpace(host)
	if !ok || host == "" {
		return "", farm.HostPolicy{}, fmt.Errorf("host rule %q: want HOST=MAX/INTERVAL, e.g. shop.example.com=2/500ms", s)
	}
	host, err := farm.HostRuleKey(host)
	if err != nil {
		return "", farm.HostPolicy{}, fmt.Errorf("host rule %q: %w", s, err)
	}
	maxS, intervalS, _ := strings.Cut(strings.TrimSpace(spec), "/")
	var pol farm.HostPolicy
	if maxS != "" {
		n, err := parseMaxConcurrent(maxS)
		if err != nil {
			return "", farm.HostPolicy{}, fmt.Errorf("host rule %q: max concurrent %q: %w", s, maxS, err)
		}
		pol.MaxConcurrent = n
	}
	if intervalS != "" && intervalS != "0" {
		d, err := time.ParseDuration(intervalS)
		if err != nil || d < 0 {
			return "", farm.HostPolicy{}, fmt.Errorf("host rule %q: interval %q is not a duration like 500ms or 2s", s, intervalS)
		}
		pol.MinInterval = d
	}
	return host, pol, nil
}

// parseMaxConcurrent reads a host's concurrency cap — the default's
// (--host-max-concurrent), a host rule's or the politeness file's: a whole
// number ≥ 1, or off for no limit (farm.HostPolicy's 0). A cap of 0 would
// leave the host's jobs pending for ever, and reading it as no limit — what
// a host rule's 0 used to mean — lifts the limit of an operator who meant to
// pause the host. The caller names what it read.
func parseMaxConcurrent(s string) (int, error) {
	if s == offWord {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("want a whole number ≥ 1, or %s for no limit", offWord)
	}
	return n, nil
}

// politenessFile is the JSON form of a politeness config file:
//
//	{"default": {"max_concurrent": 4, "min_interval": "250ms"},
//	 "hosts": {"shop.example.com": {"max_concurrent": 2, "min_interval": "1s"}}}
type politenessFile struct {
	Default *filePolicy           `json:"default"`
	Hosts   map[string]filePolicy `json:"hosts"`
}

// filePolicy is one policy in the file. A field left out inherits from the
// default policy, so {"min_interval":"1s"} adds an interval without lifting
// the default concurrency cap. max_concurrent is a number ≥ 1 or "off".
type filePolicy struct {
	MaxConcurrent json.RawMessage `json:"max_concurrent"`
	MinInterval   *string         `json:"min_interval"`
}

func (f filePolicy) policy(where string, base farm.HostPolicy) (farm.HostPolicy, error) {
	pol := base
	// null, as generated configs write an unset field, is left out too.
	if len(f.MaxConcurrent) > 0 && string(f.MaxConcurrent) != "null" {
		var s string
		if json.Unmarshal(f.MaxConcurrent, &s) != nil {
			s = string(f.MaxConcurrent)
		}
		n, err := parseMaxConcurrent(s)
		if err != nil {
			return farm.HostPolicy{}, fmt.Errorf("%s: max_concurrent %s: %w", where, f.MaxConcurrent, err)
		}
		pol.MaxConcurrent = n
	}
	if f.MinInterval != nil {
		d, err := time.ParseDuration(*f.MinInterval)
		if *f.MinInterval == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return farm.HostPolicy{}, fmt.Errorf("%s: min_interval %q is not a duration like 500ms or 2s", where, *f.MinInterval)
		}
		pol.MinInterval = d
	}
	return pol, nil
}

// loadPoliteness reads a politeness config file (JSON, see politenessFile)
// on top of base: the file's default replaces base's when present, its hosts
// are added to base's.
func loadPoliteness(path string, base farm.Politeness) (farm.Politeness, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("politeness file: %w", err)
	}
	var f politenessFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return base, fmt.Errorf("politeness file %s: %w", path, err)
	}
	out := farm.Politeness{Default: base.Default, Hosts: map[string]farm.HostPolicy{}}
	for h, p := range base.Hosts {
		out.Hosts[h] = p
	}
	if f.Default != nil {
		if out.Default, err = f.Default.policy(path+": default", base.Default); err != nil {
			return base, err
		}
	}
	// In sorted order, so that of two entries that are one host the error
	// names the same pair every time.
	written := make(map[string]string, len(f.Hosts)) // rule key → the entry as written
	for _, h := range slices.Sorted(maps.Keys(f.Hosts)) {
		key, err := farm.HostRuleKey(h)
		if err != nil {
			return base, fmt.Errorf("%s: %w", path, err)
		}
		if prev, dup := written[key]; dup {
			return base, fmt.Errorf("%s: hosts %q and %q are one host, %s: keep one", path, prev, h, key)
		}
		written[key] = h
		pol, err := f.Hosts[h].policy(fmt.Sprintf("%s: host %q", path, h), out.Default)
		if err != nil {
			return base, err
		}
		out.Hosts[key] = pol
	}
	return out, nil
}
