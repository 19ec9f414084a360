package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/browserfarm/browserfarm/supervisor"
)

// The rule every numeric flag follows. A flag's value is taken literally:
// 0 is zero, never "the default" (the default is what --help shows, taken
// from the config it sets) and never "off". A flag whose setting can be
// switched off takes the word off, which becomes the config's Off. A value
// its setting cannot take — a negative number, or 0 where zero is no valid
// count or interval — is a usage error that names the flag. Where zero is a
// valid setting (a grace period of none, a wait of none) it means just that,
// and cmd maps it onto the config's value for it.

// offWord is the word for "off" in every flag that can be switched off.
const offWord = "off"

// autoWord is the default of a count worked out from the machine at run
// time, which --help (and the README's tables made from it) cannot show as
// one number for every machine; autoCount is its value until resolved.
const (
	autoWord  = "auto"
	autoCount = -2
)

// off is the configs' Off (supervisor.Off, farm.Off, … are one value).
const off = supervisor.Off

// countValue is an int flag of at least min, or off where canOff, or auto
// where canAuto.
type countValue struct {
	name    string
	p       *int
	min     int
	canOff  bool
	canAuto bool
}

func (v countValue) String() string {
	if v.p == nil {
		return ""
	}
	if *v.p == off && v.canOff {
		return offWord
	}
	if *v.p == autoCount && v.canAuto {
		return autoWord
	}
	return strconv.Itoa(*v.p)
}

func (v countValue) Set(s string) error {
	if s == offWord && v.canOff {
		*v.p = off
		return nil
	}
	if s == autoWord && v.canAuto {
		*v.p = autoCount
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < v.min {
		return fmt.Errorf("--%s %s: want %s", v.name, s, v.want())
	}
	*v.p = n
	return nil
}

func (v countValue) want() string {
	w := fmt.Sprintf("a whole number ≥ %d", v.min)
	if v.canOff {
		w += ", or " + offWord
	}
	if v.canAuto {
		w += ", or " + autoWord
	}
	return w
}

// durationValue is a duration flag: positive, or also zero where zeroOK,
// or off where canOff.
type durationValue struct {
	name   string
	p      *time.Duration
	zeroOK bool
	canOff bool
}

func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	if *v.p == off && v.canOff {
		return offWord
	}
	return v.p.String()
}

func (v durationValue) Set(s string) error {
	if s == offWord && v.canOff {
		*v.p = off
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || (d == 0 && !v.zeroOK) {
		return fmt.Errorf("--%s %s: want %s", v.name, s, v.want())
	}
	*v.p = d
	return nil
}

func (v durationValue) want() string {
	w := "a positive duration such as 30s"
	if v.zeroOK {
		w = "a duration such as 30s, or 0"
	}
	if v.canOff {
		w += ", or " + offWord
	}
	return w
}

// count registers an int flag of at least min.
func (fs *flagSet) count(p *int, name string, def, min int, usage string) {
	*p = def
	fs.Var(countValue{name: name, p: p, min: min}, name, usage)
}

// countOrAuto registers an int flag of at least 1 whose default is auto;
// the caller replaces autoCount with the number auto stands for once the
// flags are parsed.
func (fs *flagSet) countOrAuto(p *int, name, usage string) {
	*p = autoCount
	fs.Var(countValue{name: name, p: p, min: 1, canAuto: true}, name, usage)
}

// countOrOff registers an int flag of at least 1, or off. def may be off.
func (fs *flagSet) countOrOff(p *int, name string, def int, usage string) {
	*p = def
	fs.Var(countValue{name: name, p: p, min: 1, canOff: true}, name, usage)
}

// countOrOffOrAuto registers an int flag of at least 1, off or auto, whose
// default is auto; the caller replaces autoCount once the flags are parsed.
func (fs *flagSet) countOrOffOrAuto(p *int, name, usage string) {
	*p = autoCount
	fs.Var(countValue{name: name, p: p, min: 1, canOff: true, canAuto: true}, name, usage)
}

// positive registers a duration flag that must be above zero.
func (fs *flagSet) positive(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{name: name, p: p}, name, usage)
}

// nonNegative registers a duration flag whose 0 means a zero duration.
func (fs *flagSet) nonNegative(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{name: name, p: p, zeroOK: true}, name, usage)
}

// positiveOrOff registers a duration flag that is above zero, or off.
func (fs *flagSet) positiveOrOff(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{name: name, p: p, canOff: true}, name, usage)
}

// orOff maps a config value that is Off onto the flag word, for the
// command lines `farm up` hands its consumers.
func orOff(n int) string {
	if n == off {
		return offWord
	}
	return strconv.Itoa(n)
}

// zeroAsOff maps a flag's literal zero duration onto the config's Off,
// where the config's 0 would mean its default.
func zeroAsOff(d time.Duration) time.Duration {
	if d == 0 {
		return off
	}
	return d
}
