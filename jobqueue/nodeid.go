package jobqueue

import (
	"fmt"
	"strings"
)

// MaxNodeIDLength is the longest node id: a node's NOTIFY channel name
// ("browserfarm_node." + id) must fit PostgreSQL's 63-byte identifier limit.
const MaxNodeIDLength = 46

// The node-id rule, the one place it is written: 1..MaxNodeIDLength
// characters of letters, digits and ". _ : -", starting with a letter or
// digit. ValidateNodeID checks it; NodeIDFrom makes an id that keeps it.

// nodeIDChar reports whether c may appear in a node id.
func nodeIDChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
}

// nodeIDStart reports whether c may start a node id.
func nodeIDStart(c rune) bool { return nodeIDChar(c) && c != '.' && c != '_' && c != ':' && c != '-' }

// ValidateNodeID checks a node id against the rule above.
func ValidateNodeID(id string) error {
	ok := len(id) >= 1 && len(id) <= MaxNodeIDLength && nodeIDStart(rune(id[0]))
	for _, c := range id {
		ok = ok && nodeIDChar(c)
	}
	if !ok {
		return fmt.Errorf("%w %q: use 1..%d letters, digits, '.', '_', ':' or '-', starting with a letter or digit", ErrBadNodeID, id, MaxNodeIDLength)
	}
	return nil
}

// NodeIDFrom makes a valid node id of a name (a hostname, say) and a suffix
// that must itself be of allowed characters (e.g. "-2" for a machine's second
// consumer): characters outside the rule become '-', leading ones that
// cannot start an id are dropped, an empty result becomes "node", and the
// name is cut so that name and suffix together fit MaxNodeIDLength.
func NodeIDFrom(name, suffix string) string {
	id := strings.Map(func(c rune) rune {
		if nodeIDChar(c) {
			return c
		}
		return '-'
	}, name)
	id = strings.TrimLeftFunc(id, func(c rune) bool { return !nodeIDStart(c) })
	if id == "" {
		id = "node"
	}
	if n := MaxNodeIDLength - len(suffix); len(id) > n {
		id = id[:max(n, 0)]
	}
	return id + suffix
}
