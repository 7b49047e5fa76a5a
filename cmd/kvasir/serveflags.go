package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/server"
)

// connFlags are serve's flags for connections and for browsers: server.Config's
// deadlines, caps and allowed hosts and origins.
type connFlags struct {
	headerTimeout, bodyTimeout, idleTimeout, writeTimeout time.Duration
	maxConns                                              int
	streamBuffer                                          string
	allowedHosts, allowedOrigins                          string
	allowedMethods, allowedHeaders                        string
}

// addConnFlags defines the connection flags on fs.
func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{}
	fs.DurationVar(&f.headerTimeout, "header-timeout", server.DefaultHeaderTimeout, "how long a client may take to send a request's headers")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "how long a request's body may take to arrive (slower: 408)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", server.DefaultIdleTimeout, "how long a kept-alive connection may wait for its next request")
	fs.DurationVar(&f.writeTimeout, "write-timeout", server.DefaultWriteTimeout, "how long one write to a client (a response, a stream's chunk) may block before the client is cut off and its request aborted")
	fs.IntVar(&f.maxConns, "max-connections", server.DefaultMaxConnections(), "most connections open at once; one more gets 503 and is closed (the default, at most 4096, leaves file descriptors under the open-file limit)")
	fs.StringVar(&f.streamBuffer, "max-stream-buffer", "256KiB", "most bytes of a stream waiting for a slow client; beyond it the client is cut off and its request aborted")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "", "comma-separated Host names (optionally with :port) answered besides loopback names and the listen address; * turns the Host check off")
	fs.StringVar(&f.allowedOrigins, "allowed-origins", "*", "comma-separated origins (scheme://host[:port], or null) whose web pages may call the server, with CORS; * allows every origin, as vLLM; \"\" refuses browsers")
	fs.StringVar(&f.allowedMethods, "allowed-methods", "*", "comma-separated methods a CORS preflight may ask for; * allows any")
	fs.StringVar(&f.allowedHeaders, "allowed-headers", "*", "comma-separated request headers a CORS preflight may ask for; * allows any")
	return f
}

// apply checks the flags and sets them in cfg.
func (f *connFlags) apply(cfg *server.Config) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"header-timeout", f.headerTimeout}, {"body-timeout", f.bodyTimeout}, {"idle-timeout", f.idleTimeout}, {"write-timeout", f.writeTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s %v: must be positive", d.name, d.v)
		}
	}
	if f.maxConns <= 0 {
		return fmt.Errorf("--max-connections %d: must be positive", f.maxConns)
	}
	buf, err := kvasir.ParseBytes(f.streamBuffer)
	if err != nil || buf <= 0 {
		return fmt.Errorf("--max-stream-buffer %q: give a positive size, such as 256KiB", f.streamBuffer)
	}
	cfg.HeaderTimeout, cfg.BodyTimeout, cfg.IdleTimeout, cfg.WriteTimeout = f.headerTimeout, f.bodyTimeout, f.idleTimeout, f.writeTimeout
	cfg.MaxConnections, cfg.MaxStreamBuffer = f.maxConns, buf
	cfg.AllowedHosts, cfg.AllowedOrigins = commaList(f.allowedHosts), commaList(f.allowedOrigins)
	cfg.AllowedMethods, cfg.AllowedHeaders = commaList(f.allowedMethods), commaList(f.allowedHeaders)
	return cfg.Validate()
}

// commaList returns the non-empty, trimmed items of a comma-separated flag value.
func commaList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
