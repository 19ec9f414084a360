// Package cfgrule is the one rule every config struct of the project follows
// for its numeric fields: 0 means the field's documented default, Off turns
// off a field that can be off (a threshold never reached, an interval whose
// work never runs, a bound that never cuts, a retention that keeps forever),
// and any other negative value is an error that names the field. The
// packages re-export Off (supervisor.Off, farm.Off, …) so that their users
// need not import this one; `cmd` maps its flags' "off" onto it.
package cfgrule

import "fmt"

// Off is the value that turns a field off.
const Off = -1

// Resolve applies the rule to one field named name: a 0 becomes def, Off
// stays where canOff, and any other negative value is an error naming the
// field. def may itself be Off (a field that is off unless set).
func Resolve[T ~int | ~int64](name string, v *T, def T, canOff bool) error {
	switch {
	case *v == 0:
		*v = def
	case *v == Off && canOff:
	case *v < 0 && canOff:
		return fmt.Errorf("%s must not be negative, got %d (0: the default; Off, -1: off)", name, int64(*v))
	case *v < 0:
		return fmt.Errorf("%s must not be negative, got %d (0: the default; it cannot be off)", name, int64(*v))
	}
	return nil
}
