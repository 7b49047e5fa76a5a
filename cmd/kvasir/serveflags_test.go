package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/server"
)

// TestConnFlags: the connection flags reach server.Config, and values the server cannot
// use are refused naming the flag.
func TestConnFlags(t *testing.T) {
	parse := func(args ...string) (server.Config, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addConnFlags(fs)
		if err := fs.Parse(args); err != nil {
			return server.Config{}, err
		}
		var cfg server.Config
		return cfg, f.apply(&cfg)
	}
	cfg, err := parse("--write-timeout", "2s", "--max-stream-buffer", "64KiB", "--max-connections", "7",
		"--allowed-hosts", " kvasir.lan, box:8443 ,", "--allowed-origins", "http://localhost:3000")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WriteTimeout != 2*time.Second || cfg.MaxStreamBuffer != 64<<10 || cfg.MaxConnections != 7 ||
		strings.Join(cfg.AllowedHosts, "|") != "kvasir.lan|box:8443" || strings.Join(cfg.AllowedOrigins, "|") != "http://localhost:3000" {
		t.Errorf("config %+v", cfg)
	}
	if cfg.HeaderTimeout != 10*time.Second || cfg.BodyTimeout != time.Minute || cfg.IdleTimeout != 2*time.Minute {
		t.Errorf("default deadlines %v %v %v", cfg.HeaderTimeout, cfg.BodyTimeout, cfg.IdleTimeout)
	}
	// The flag's default is the server's (and the documented one).
	if cfg, err := parse(); err != nil || cfg.MaxStreamBuffer != server.DefaultMaxStreamBuffer || server.DefaultMaxStreamBuffer != 256<<10 {
		t.Errorf("default --max-stream-buffer %d (%v)", cfg.MaxStreamBuffer, err)
	}
	for _, tc := range [][]string{
		{"--header-timeout", "0s"}, {"--body-timeout", "-1s"}, {"--idle-timeout", "0"}, {"--write-timeout", "-5m"},
		{"--max-connections", "0"}, {"--max-connections", "-3"}, {"--max-stream-buffer", "0"}, {"--max-stream-buffer", "lots"},
		{"--allowed-origins", "localhost:3000"}, {"--allowed-hosts", "http://kvasir.lan"},
	} {
		_, err := parse(tc...)
		if err == nil {
			t.Errorf("%v accepted", tc)
			continue
		}
		// The allowed hosts and origins are refused by server.Config.Validate, as "allowed
		// host ..." and "allowed origin ...".
		if msg := err.Error(); !strings.Contains(msg, tc[0]) && !strings.Contains(msg, "allowed ") {
			t.Errorf("%v: error %q does not name the flag", tc, err)
		}
	}
}
