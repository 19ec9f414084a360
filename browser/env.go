package browser

import (
	"slices"
	"strings"
)

// chromeVars are the environment variables Chrome (or a wrapper script
// such as google-chrome's) reads: the locale and time zone a page sees,
// fonts, libraries, and its own CHROME_*/CHROMIUM_* knobs. Nothing else
// goes to Chrome: every process of its tree inherits its environment,
// renderers included, so a page that exploits a renderer reads it from its
// own memory without escaping any sandbox — a database URL, an API token or
// cloud credentials there would be its for the taking. Not the proxy
// variables either: a farm node's Chrome runs behind its egress proxy
// (--proxy-server, which makes Chrome ignore them), and they can carry a
// proxy's password.
var chromeVars = map[string]bool{
	"HOME": true, "USER": true, "LOGNAME": true, "PATH": true,
	"LANG": true, "LANGUAGE": true, "TZ": true, "TZDIR": true,
	"LD_LIBRARY_PATH": true,
	"FONTCONFIG_FILE": true, "FONTCONFIG_PATH": true, "FONTCONFIG_SYSROOT": true,
}

// chromeVarPrefixes are families of such variables: LC_* (locale), XDG_*
// (the data and config search paths; the config and cache homes Chrome gets
// are its profile's whatever the caller passes), CHROME_* and CHROMIUM_*
// (Chrome's logging switches, Debian's wrapper's CHROMIUM_FLAGS).
var chromeVarPrefixes = []string{"LC_", "XDG_", "CHROME_", "CHROMIUM_"}

// chromeVar reports whether Chrome reads the environment variable name.
func chromeVar(name string) bool {
	if chromeVars[name] {
		return true
	}
	for _, p := range chromeVarPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Environ is what Chrome gets of environ (NAME=value entries, such as
// os.Environ()'s): the variables Chrome reads, and those named in extra
// (for a wrapper script given as Options.ExecPath), in environ's order.
// The rest, a caller's secrets among them, is left out.
func Environ(environ []string, extra ...string) []string {
	out := []string{} // never nil: Options.Env's nil means the default
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); chromeVar(name) || slices.Contains(extra, name) {
			out = append(out, kv)
		}
	}
	return out
}
