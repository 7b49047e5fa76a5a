//go:build linux

package abuse

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// ordinaryBody is what an ordinary user asks while a case runs: a greedy completion of a
// fixed length, some tens of milliseconds on two cores, so that the few milliseconds of CPU
// any request costs (a hostile one's bytes included) are not mistaken for a stall.
const ordinaryBody = `{"prompt":"Once upon a time","max_tokens":128,"temperature":0,"ignore_eos":true}`

// ordinaryClients is how many ordinary users send requests, one after another each, during
// a case and while the idle latency is measured.
const ordinaryClients = 2

// idleWindow is how long the idle server's latency is measured before each case.
const idleWindow = 500 * time.Millisecond

// caseWindow is the shortest stretch of ordinary requests taken around a case, so that a
// case refused in a millisecond still has its neighbours measured.
const caseWindow = 500 * time.Millisecond

// sample is one ordinary request: when it started and how long it took.
type sample struct {
	start time.Time
	took  time.Duration
}

// ordinaryLoad is ordinaryClients users sending ordinaryBody in a loop until finish.
type ordinaryLoad struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []sample
	errs    []string
}

// ordinaryClient keeps its connections, as an ordinary API client does.
var ordinaryClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: ordinaryClients}, Timeout: 30 * time.Second}

// startOrdinary starts the ordinary users against s.
func startOrdinary(s *server) *ordinaryLoad {
	l := &ordinaryLoad{stop: make(chan struct{})}
	for range ordinaryClients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				err := ordinaryRequest(s)
				took := time.Since(start)
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err.Error())
				} else {
					l.samples = append(l.samples, sample{start, took})
				}
				l.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return l
}

// ordinaryRequest sends one ordinary completion and checks it succeeds.
func ordinaryRequest(s *server) error {
	res, err := ordinaryClient.Post(s.url("/v1/completions"), "application/json", strings.NewReader(ordinaryBody))
	if err != nil {
		return fmt.Errorf("ordinary request: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("ordinary request: reading the answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("ordinary request: status %d: %s", res.StatusCode, tail(string(b), 300))
	}
	return nil
}

// finish waits until not before, stops the users, and returns the latencies of the requests
// that ran at some time from `from` on, and the ordinary requests' failures.
func (l *ordinaryLoad) finish(from, notBefore time.Time) ([]time.Duration, []string) {
	time.Sleep(time.Until(notBefore))
	close(l.stop)
	l.wg.Wait()
	var ds []time.Duration
	for _, s := range l.samples {
		if !s.start.Add(s.took).Before(from) {
			ds = append(ds, s.took)
		}
	}
	return ds, l.errs
}

// p99 is the 99th percentile of ds (the nearest rank), 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (99*len(s) + 99) / 100 // ceil(0.99 n)
	return s[rank-1]
}

// idleP99 measures the p99 latency of ordinary requests on the idle server s over
// idleWindow.
func idleP99(s *server) (time.Duration, error) {
	from := time.Now()
	l := startOrdinary(s)
	ds, errs := l.finish(from, from.Add(idleWindow))
	if len(errs) > 0 {
		return 0, fmt.Errorf("on the idle server: %s", errs[0])
	}
	if len(ds) < 10 {
		return 0, fmt.Errorf("only %d ordinary requests in %v on the idle server", len(ds), idleWindow)
	}
	return p99(ds), nil
}

// warm sends a few ordinary requests to a new server, so that what a first request starts
// (the engine's first steps, the connection, the heap's growth) is not measured.
func warm(s *server) error {
	for range 10 {
		if err := ordinaryRequest(s); err != nil {
			return err
		}
	}
	return nil
}
