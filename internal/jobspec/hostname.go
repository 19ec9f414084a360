package jobspec

import (
	"fmt"
	"net/netip"
	"strings"
)

// CheckIPZone says why a, an IP address written as a job URL's host or a
// proxy's, cannot be used, or nil: an IPv6 address with a zone
// (fe80::1%eth0, written [fe80::1%25eth0] in a URL) names a network
// interface of the machine it was written on, and Chrome refuses a URL
// with one ("Cannot navigate to invalid URL", at every attempt). The
// caller names the field.
func CheckIPZone(a netip.Addr) error {
	if a.Zone() == "" {
		return nil
	}
	return fmt.Errorf("IPv6 address %s has a zone (%%%s, %%25%s in a URL), which browsers refuse: give the address without it", a.WithZone(""), a.Zone(), a.Zone())
}

// CheckHostName says why name, a host name in its ASCII form (punycode for
// an internationalized name, lower case, without the one trailing dot a
// URL may have), cannot be a DNS name, or nil: labels of 1 to 63 letters,
// digits, hyphens and underscores that neither start nor end with a hyphen,
// at most 253 bytes in all. An underscore is allowed: DNS itself allows any
// byte, names with one exist and resolve (a_b.example.com), and Chrome
// loads them; refusing them would refuse pages that render. A single label
// (localhost, intranet) is a name too. The caller names the field.
func CheckHostName(name string) error {
	if name == "" {
		return fmt.Errorf("the host name is empty")
	}
	if len(name) > 253 {
		return fmt.Errorf("host name %q is %d bytes; a DNS name has at most 253", cut(name), len(name))
	}
	for _, label := range strings.Split(name, ".") {
		switch {
		case label == "":
			return fmt.Errorf("host name %q has an empty label (two dots in a row, or a leading dot)", name)
		case len(label) > 63:
			return fmt.Errorf("host name %q has a label of %d bytes; a DNS label has at most 63", cut(name), len(label))
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("host name %q has a label that starts or ends with a hyphen (%q)", name, label)
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name %q has a character a DNS name cannot have (%q): only letters, digits, hyphens and underscores", name, c)
			}
		}
	}
	return nil
}

func cut(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
