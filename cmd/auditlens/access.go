package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
)

// insecureReadsFlag is the serve flag that leaves the read side open on a
// non-loopback address. Its name says what it does, so that nobody sets it
// by accident and every reviewer of a manifest sees it.
const insecureReadsFlag = "insecure-unauthenticated-reads"

// loopbackAddr reports whether a --listen address accepts connections
// from this machine only: a loopback IP or "localhost". ":8080" and
// "0.0.0.0:8080" listen on every interface.
func loopbackAddr(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkReadAccess refuses a serve whose read API and UI would answer
// anyone on the network. Audit events say who did what from where, and
// with a careless policy they hold request bodies: outside loopback the
// read side needs bearer tokens (--api-token, --api-token-file) or client
// certificates (--client-ca, which every connection must then present),
// unless the operator opts out by name.
func checkReadAccess(listen string, tokens, clientCerts, optOut bool) error {
	if tokens || clientCerts || optOut || loopbackAddr(listen) {
		return nil
	}
	return fmt.Errorf("%w: --listen %s is not a loopback address, and the read API and UI (every stored audit event: who did what, from where) "+
		"would answer anyone who reaches it. Give the read side credentials: --api-token-file FILE (or --api-token TOKEN) for bearer tokens, "+
		"or --client-ca for client certificates; or listen on 127.0.0.1; or, only behind something that authenticates for you, --%s",
		errUsage, listen, insecureReadsFlag)
}

// readTokenFile reads bearer tokens, one per line; blank lines and lines
// starting with # are skipped, surrounding space is trimmed.
func readTokenFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --api-token-file: %w", err)
	}
	var toks []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		toks = append(toks, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading --api-token-file %s: %w", path, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("--api-token-file %s holds no token", path)
	}
	return toks, nil
}
