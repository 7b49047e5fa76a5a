package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeHelpHidesAPIKey checks that serve -h does not print $KVASIR_API_KEY (it used to
// be the flag's default, shown by the help) but says where the key comes from.
func TestServeHelpHidesAPIKey(t *testing.T) {
	t.Setenv("KVASIR_API_KEY", "sk-very-secret")
	help := captureStderr(t, func() { runServe([]string{"-h"}) })
	if strings.Contains(help, "sk-very-secret") {
		t.Fatalf("serve -h prints the API key:\n%s", help)
	}
	if !strings.Contains(help, "KVASIR_API_KEY") {
		t.Fatalf("serve -h does not say the key is read from KVASIR_API_KEY:\n%s", help)
	}
}

// TestAPIKeyFromEnvironment checks that the key is read from KVASIR_API_KEY when --api-key
// is not given, and that the flag, even empty, wins over it.
func TestAPIKeyFromEnvironment(t *testing.T) {
	t.Setenv("KVASIR_API_KEY", "from-env")
	for _, c := range []struct {
		args []string
		want string
	}{{nil, "from-env"}, {[]string{"--api-key", "from-flag"}, "from-flag"}, {[]string{"--api-key", ""}, ""}} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		key := fs.String("api-key", "", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		envDefault(fs, "api-key", "KVASIR_API_KEY", key)
		if *key != c.want {
			t.Errorf("%q: key %q, want %q", c.args, *key, c.want)
		}
	}
}

// TestSecondSignalExits sends onSignals two signals: the first starts the drain and does not
// exit, the second exits at once with 128 + the signal's number.
func TestSecondSignalExits(t *testing.T) {
	sigs, done := make(chan os.Signal, 1), make(chan struct{})
	drained, exited := make(chan struct{}), make(chan int, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go onSignals(sigs, done, func() { close(drained) }, func(code int) { exited <- code }, log)
	sigs <- syscall.SIGTERM
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not start the drain")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first signal exited with %d", code)
	case <-time.After(50 * time.Millisecond):
	}
	sigs <- syscall.SIGINT
	select {
	case code := <-exited:
		if code != 130 {
			t.Fatalf("exit code %d after a second SIGINT, want 130", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not exit")
	}
	close(done)
}

// TestSignalWatcherEnds checks that onSignals returns once the server is done, signalled
// or not.
func TestSignalWatcherEnds(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, signals := range []int{0, 1} {
		sigs, done, ended := make(chan os.Signal, 1), make(chan struct{}), make(chan struct{})
		go func() {
			onSignals(sigs, done, func() {}, func(int) { t.Error("exited") }, log)
			close(ended)
		}()
		if signals == 1 {
			sigs <- syscall.SIGTERM
		}
		close(done)
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("onSignals still runs after done, %d signals sent", signals)
		}
	}
}
