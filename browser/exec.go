package browser

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Kind is a browser binary the farm can drive.
type Kind string

const (
	// KindShell is chrome-headless-shell (Debian's chromium-headless-shell):
	// Chrome's old headless mode, a build without the browser UI that
	// Puppeteer launches as headless: 'shell'. It renders the same pages
	// for about half the CPU of full Chrome.
	KindShell Kind = "shell"
	// KindChrome is full Chromium or Chrome in its new headless mode: the
	// whole browser with its UI layers, for sites that tell the shell
	// apart.
	KindChrome Kind = "chrome"
)

// ParseKind checks a browser kind name; "" means the shell if installed,
// else full Chrome.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case "", KindShell, KindChrome:
		return k, nil
	}
	return "", fmt.Errorf("unknown browser %q (want shell or chrome)", s)
}

// FindExec returns the first installed binary of the kind; "" tries the
// shell first, then full Chrome. It only probes the usual places: Debian's
// real binaries under /usr/lib/chromium (without the wrapper script's extra
// shell), then the usual names on $PATH.
func FindExec(kind Kind) (string, error) {
	probe := map[Kind][]string{
		KindShell:  {"/usr/lib/chromium/chromium-headless-shell", "chromium-headless-shell", "chrome-headless-shell"},
		KindChrome: {"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"},
	}
	kinds := []Kind{kind}
	if kind == "" {
		kinds = []Kind{KindShell, KindChrome}
	}
	for _, k := range kinds {
		for _, name := range probe[k] {
			if filepath.IsAbs(name) {
				if fi, err := os.Stat(name); err == nil && !fi.IsDir() {
					return name, nil
				}
				continue
			}
			if p, err := exec.LookPath(name); err == nil {
				return p, nil
			}
		}
	}
	switch kind {
	case KindShell:
		return "", errors.New("browser: no chrome-headless-shell found: install Debian's chromium-headless-shell, or pick full Chrome")
	case KindChrome:
		return "", errors.New("browser: no Chrome or Chromium found: install Debian's chromium")
	}
	return "", errors.New("browser: no browser found: install Debian's chromium-headless-shell (or chromium), or name the binary")
}
