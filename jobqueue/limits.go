package jobqueue

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// ResultLimits bound what one result may hold. A node passes them to its
// browser, which enforces them in the page before the data crosses into Go
// where it can; CompleteMany enforces them again before anything reaches the
// database. Data and screenshots over their cap fail the job permanently
// (class result_too_large, naming the cap); console errors past their count
// are dropped (the documented truncation). Followed links have their own
// bounds (MaxCollectedLinks, follow.max_links), counted in LinksOverLimit.
type ResultLimits struct {
	// DataBytes caps the JSON of the extract expression.
	DataBytes int `json:"data_bytes"`
	// ScreenshotBytes caps the PNG of a screenshot.
	ScreenshotBytes int `json:"screenshot_bytes"`
	// ConsoleErrors caps how many console errors are kept (each line is
	// cut at its own bound).
	ConsoleErrors int `json:"console_errors"`
}

// Default result limits, from internal/jobspec (their one home: the browser
// applies them too when its caller sets none); `farm consumer`'s flags
// default to them. A zero field of a ResultLimits means its default.
const (
	DefaultMaxDataBytes       = jobspec.DefaultMaxDataBytes
	DefaultMaxScreenshotBytes = jobspec.DefaultMaxScreenshotBytes
	DefaultMaxConsoleErrors   = jobspec.DefaultMaxConsoleErrors
	// hardMaxResultBytes is the most any one result field may be configured
	// to: far under PostgreSQL's 1 GB per field, and small enough that a
	// node holding a few of them stays within its memory.
	hardMaxResultBytes = 256 << 20
)

// DefaultResultLimits returns the documented defaults.
func DefaultResultLimits() ResultLimits {
	return ResultLimits{
		DataBytes:       DefaultMaxDataBytes,
		ScreenshotBytes: DefaultMaxScreenshotBytes,
		ConsoleErrors:   DefaultMaxConsoleErrors,
	}
}

// Check reports the first limit outside its range, naming it.
func (l ResultLimits) Check() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"data_bytes", l.DataBytes, hardMaxResultBytes},
		{"screenshot_bytes", l.ScreenshotBytes, hardMaxResultBytes},
		{"console_errors", l.ConsoleErrors, jobspec.MaxConsoleErrors},
	} {
		if f.v < 1 || f.v > f.max {
			return fmt.Errorf("result limit %s: %d is out of range 1..%d", f.name, f.v, f.max)
		}
	}
	return nil
}

// withDefaults fills the zero fields with the defaults; a negative one is
// refused (New panics naming it). Check bounds the rest.
func (l ResultLimits) withDefaults() ResultLimits {
	d := DefaultResultLimits()
	mustResolve("ResultLimits",
		cfgrule.Resolve("DataBytes", &l.DataBytes, d.DataBytes, false),
		cfgrule.Resolve("ScreenshotBytes", &l.ScreenshotBytes, d.ScreenshotBytes, false),
		cfgrule.Resolve("ConsoleErrors", &l.ConsoleErrors, d.ConsoleErrors, false),
	)
	return l
}

// Error classes of results the queue refuses. Both are permanent: running the
// job again would produce the same result.
const (
	ClassResultTooLarge = "result_too_large"
	ClassResultInvalid  = "result_invalid"
)

// ErrResultRefused matches (errors.Is) every *ResultError.
var ErrResultRefused = errors.New("result refused")

// ResultError says why one job's result cannot be stored. The job should fail
// with Class, permanently.
type ResultError struct {
	Class string
	Msg   string
	Err   error // the database's refusal, if it was the database
}

func (e *ResultError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Class, e.Msg, e.Err)
	}
	return e.Class + ": " + e.Msg
}

func (e *ResultError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrResultRefused) true.
func (e *ResultError) Is(target error) bool { return target == ErrResultRefused }

// tooLarge is the error of a field over its cap.
func tooLarge(field string, size, limit int) *ResultError {
	return &ResultError{Class: ClassResultTooLarge,
		Msg: fmt.Sprintf("%s is %d bytes, over the cap of %d bytes (result limit %s)", field, size, limit, field)}
}

// refusedByDatabase reports whether err is PostgreSQL refusing the data of a
// statement — a data exception (class 22) or a program limit such as the
// 1 GB field size (class 54) — rather than failing to run it: sending the
// same data again cannot succeed.
func refusedByDatabase(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return nil, false
	}
	switch pe.Code[:2] {
	case "22", "54":
		return pe, true
	}
	return nil, false
}

// databaseRefusal is the ResultError of one result the database refused.
func databaseRefusal(pe *pgconn.PgError) *ResultError {
	class := ClassResultInvalid
	if pe.Code[:2] == "54" {
		class = ClassResultTooLarge
	}
	return &ResultError{Class: class, Msg: "the database refused the result", Err: pe}
}
