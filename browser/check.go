package browser

// Check reports whether the browser can render r: the checks Render makes
// before it touches Chrome, without a browser. Its error is an *Error of
// ClassInvalid that names the field. The farm's tests hold every job spec the
// queue accepts to it.
func (r Request) Check() error {
	_, err := r.prepare()
	return err
}
