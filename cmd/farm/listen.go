package main

import (
	"errors"
	"net"
	"strconv"
	"syscall"
)

// checkListenAddr rejects an address flag no listener can bind, naming the
// flag, so that it fails at once rather than after the database wait and
// the browser's start: host:port, the host empty (every interface), an IP
// address or a name, the port a number (0: any free one). A named port
// (:http) is refused too: the consumer denies its jobs its own health
// endpoint by the port's number.
func checkListenAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		reason := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			reason = ae.Err
		}
		return usagef("--%s %q: want host:port, e.g. 127.0.0.1:9091 (%s)", flag, addr, reason)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return usagef("--%s %q: the port %q is not a number 0..65535", flag, addr, port)
	}
	return nil
}

// listenError is a failure to bind the address an address flag names: a
// usage error (the flag must change, and a restart would meet it again),
// which says so plainly when another process holds the address.
func listenError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return usagef("--%s %s: the address is in use: another process listens there (every process on a host needs an address of its own)", flag, addr)
	}
	return usagef("--%s %s: %v", flag, addr, err)
}
