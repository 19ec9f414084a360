package browser

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Error classes. A class names what went wrong in words an operator and a
// retry policy understand; Retriable says whether running the job again
// (usually on a fresh Chrome) can succeed.
const (
	// ClassTimeout: the job's timeout ended first (hang, endless loop, a
	// selector that never showed). Retriable.
	ClassTimeout = "timeout"
	// ClassNetwork: the page could not be fetched (connection refused or
	// reset, DNS, proxy failure). Retriable; certificate errors are not.
	ClassNetwork = "network"
	// ClassCrashed: the tab's renderer or the whole Chrome died. Retriable.
	ClassCrashed = "crashed"
	// ClassUnresponsive: Chrome itself stopped answering CDP. Retriable.
	ClassUnresponsive = "unresponsive"
	// ClassCanceled: the caller's context ended (drain, shutdown). Retriable.
	ClassCanceled = "canceled"
	// ClassHTTP: the main document answered with status >= 400 (retriable
	// for 408, 425, 429 and 5xx), or with no page: 204, 205, or a 304 with
	// nothing cached, which Chrome does not show (permanent). The Result
	// is returned along with it.
	ClassHTTP = "http"
	// ClassRedirect: too many redirects (a redirect loop). Permanent.
	ClassRedirect = "redirect"
	// ClassDownload: the URL is a file download, not a page. Permanent.
	ClassDownload = "download"
	// ClassExtract: the extract expression (or an action's script) threw.
	// Permanent.
	ClassExtract = "extract"
	// ClassAction: an action could not be performed (e.g. its element is not
	// an input). Permanent.
	ClassAction = "action"
	// ClassInvalid: the request itself is wrong (bad URL, unknown action),
	// or its page redirects to a URL the browser does not load as a page
	// (view-source:, ftp:, mailto:, file:). Permanent.
	ClassInvalid = "invalid"
	// ClassTooLarge: the extract value or screenshot is over its cap
	// (Request.MaxDataBytes, MaxScreenshotBytes). Permanent.
	ClassTooLarge = "result_too_large"
	// ClassDestinationRefused: the page (its URL, a redirect, or a later
	// navigation of its main frame before the result was read) is at an
	// address the egress policy refuses. Permanent.
	ClassDestinationRefused = "destination_refused"
	// ClassNotHTML: the page is not a document a selector can appear in
	// (an image, a PDF, a binary file) while the job waits for one, or is
	// one Chrome shows as text (plain text, JSON, CSS, JavaScript), where
	// no script runs, and has loaded without the awaited element; the
	// message names the content type that arrived. Permanent.
	ClassNotHTML = "not_html"
	// ClassInternal: CDP failed in an unexpected way. Retriable, since a
	// fresh tab or Chrome usually fixes it.
	ClassInternal = "internal"
)

// Error is the error of a failed render.
type Error struct {
	// Class is one of the Class* constants.
	Class string
	// Retriable reports whether the job may succeed when run again.
	Retriable bool
	// Err is the underlying cause.
	Err error
}

func (e *Error) Error() string {
	kind := "permanent"
	if e.Retriable {
		kind = "retriable"
	}
	if e.Err == nil {
		return fmt.Sprintf("browser: %s (%s)", e.Class, kind)
	}
	return fmt.Sprintf("browser: %s (%s): %v", e.Class, kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsRetriable reports whether err (or an error it wraps) is an *Error that
// is retriable. Errors that are not *Error are treated as retriable, since an
// unknown failure is more likely the farm's fault than the page's.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable
	}
	return true
}

// ClassOf returns the class of err, "" for nil, ClassInternal for an error
// that is not an *Error.
func ClassOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ClassInternal
}

// FailedBeforePage reports whether err is a render's failure from a lost
// Chrome (ChromeLossClasses) that came before the job's page was asked for
// (while getting or setting up its tab): the failure of the Chrome the job
// was given, which nothing the page does can have caused.
func FailedBeforePage(err error) bool { return errors.As(err, new(beforePage)) }

// ChromeLossClasses are the classes of a render's failure when the Chrome
// under it was lost: it crashed or stopped answering.
func ChromeLossClasses() []string { return []string{ClassCrashed, ClassUnresponsive} }

// MarkBeforePage returns err marked for FailedBeforePage when it is the
// failure of a lost Chrome (ChromeLossClasses) that came before the job's
// page was asked for, else err itself. The mark wraps err: its text, class
// and cause are unchanged, and a lost Chrome's error, which every job that
// was on it shares, is not touched.
func MarkBeforePage(err error) error {
	if !slices.Contains(ChromeLossClasses(), ClassOf(err)) {
		return err
	}
	return beforePage{err}
}

// beforePage is MarkBeforePage's mark.
type beforePage struct{ error }

func (e beforePage) Unwrap() error { return e.error }

func newErr(class string, retriable bool, format string, args ...any) *Error {
	return &Error{Class: class, Retriable: retriable, Err: fmt.Errorf(format, args...)}
}

// classifyNetError maps Chrome's net error text of a failed navigation
// (net/base/net_error_list.h) to an error class.
func classifyNetError(text string) (class string, retriable bool) {
	t := strings.TrimPrefix(text, "net::")
	switch {
	case t == "ERR_TOO_MANY_REDIRECTS":
		return ClassRedirect, false
	case t == "ERR_INVALID_URL", t == "ERR_UNSAFE_PORT", t == "ERR_DISALLOWED_URL_SCHEME",
		t == "ERR_UNKNOWN_URL_SCHEME", t == "ERR_INVALID_REDIRECT", t == "ERR_UNSAFE_REDIRECT":
		return ClassInvalid, false
	case strings.HasPrefix(t, "ERR_CERT_"), t == "ERR_SSL_PROTOCOL_ERROR",
		t == "ERR_SSL_VERSION_OR_CIPHER_MISMATCH", t == "ERR_BAD_SSL_CLIENT_AUTH_CERT":
		return ClassNetwork, false
	case t == "ERR_BLOCKED_BY_CLIENT", t == "ERR_BLOCKED_BY_RESPONSE", t == "ERR_BLOCKED_BY_ADMINISTRATOR":
		return ClassNetwork, false
	case t == "ERR_ABORTED":
		// A navigation the browser itself aborted: a download that was
		// denied, or a navigation replaced by another one. The caller
		// refines this with what it saw of the response.
		return ClassNetwork, true
	}
	return ClassNetwork, true
}

// httpStatusErr is the error of a page that answered with an HTTP error
// status.
func httpStatusErr(status int) error {
	return newErr(ClassHTTP, httpRetriable(status), "HTTP %d", status)
}

// httpRetriable reports whether an HTTP error status is worth retrying.
func httpRetriable(status int) bool {
	return status == 408 || status == 425 || status == 429 || status >= 500
}
