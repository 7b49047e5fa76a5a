//go:build linux

package abuse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// The bounds of issue 14's "Done when", for every case.
const (
	// caseTime is the longest a hostile request may take to be answered.
	caseTime = time.Second
	// caseMemory is the most extra server memory a case may cost (peak resident set during
	// the case over the resident set before it).
	caseMemory = 50 << 20
	// latencyFactor bounds ordinary requests' p99 during a case, relative to the idle
	// server's.
	latencyFactor = 2
	// healthTime is the longest /health may take while connections are held.
	healthTime = 100 * time.Millisecond
)

// hostileTimeout is how long the suite waits for a hostile request's answer: beyond
// caseTime, so that a slow answer is measured, and short, so that an unfixed tree's case
// fails in seconds.
const hostileTimeout = 5 * time.Second

// hostile is one hostile HTTP request and the error it must get.
type hostile struct {
	name   string
	method string // POST when empty
	path   string
	// body makes the body (before the clock starts).
	body func() string
	// contentType is the Content-Type (application/json when empty).
	contentType string
	// host, when set, replaces the Host header; origin, when set, is sent as Origin.
	host, origin string
	// status is the status it must get; 0 means any 4xx.
	status int
	// mentions must match the error's message, param or code: the limit or parameter the
	// refusal names (nil for a success).
	mentions *regexp.Regexp
}

// answer is what a hostile request got.
type answer struct {
	status int
	header http.Header
	// close says the answer had Connection: close (which Go's reader takes out of header).
	close bool
	body  []byte // its first 64 KiB
	took  time.Duration
	err   error
}

// send sends h with body to s on a connection of its own and reads the answer (at most 64
// KiB of its body) as it comes: a server may answer before the body is all sent, and close
// the connection.
func (h hostile) send(s *server, body string) answer {
	method := h.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, s.url(h.path), strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if method == http.MethodPost {
		ct := h.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if h.host != "" {
		req.Host = h.host
	}
	if h.origin != "" {
		req.Header.Set("Origin", h.origin)
	}
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		return answer{err: err}
	}
	conn, err := dialRaw(s, 0)
	if err != nil {
		return answer{err: err}
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		conn.Write(raw.Bytes()) // an error is the server closing early, which the answer shows
	}()
	a, err := readAnswer(conn, hostileTimeout)
	conn.Close()
	<-written
	if err != nil {
		a.err = err
	}
	return a
}

// checkRefusal checks that a is a 4xx (status when it is not 0) in OpenAI's error shape
// whose message, param or code matches mentions.
func checkRefusal(c *check, a answer, status int, mentions *regexp.Regexp) {
	if a.err != nil {
		c.Fatalf("%v", a.err)
	}
	if status != 0 && a.status != status || a.status < 400 || a.status > 499 {
		want := "a 4xx"
		if status != 0 {
			want = fmt.Sprint(status)
		}
		c.Fatalf("status %d, want %s: %s", a.status, want, tail(string(a.body), 500))
	}
	var env struct {
		Error *struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.body, &env); err != nil || env.Error == nil {
		c.Fatalf("status %d without an OpenAI error body (%v): %s", a.status, err, tail(string(a.body), 500))
	}
	e := env.Error
	if e.Message == nil || *e.Message == "" || e.Type == nil {
		c.Errorf("error without message or type: %s", a.body)
	}
	text := strings.Join([]string{deref(e.Message), deref(e.Param), deref(e.Code)}, " ")
	if mentions != nil && !mentions.MatchString(text) {
		c.Errorf("the error does not name the limit (want %v): %s", mentions, a.body)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// attempts is how many times a case that meets everything but the latency is tried: each
// time after measuring the idle server again, since on a shared machine a neighbour's burst
// can slow one window, but not a server that stalls on every such request.
const attempts = 3

// replay sends h to s while ordinary users keep asking, and checks everything a case must meet:
// the refusal, its time, the server's extra memory, the ordinary users' latency (p99 within
// latencyFactor of the idle server's, measured just before) and success, and a server
// alive, healthy and idle afterwards.
func replay(c *check, s *server, h hostile) {
	body := ""
	if h.body != nil {
		body = h.body()
	}
	for attempt := 1; ; attempt++ {
		idle, err := idleP99(s)
		if err != nil {
			c.Fatalf("%v", err)
		}
		lat, errs := once(c, s, h, body, idle)
		p := p99(lat)
		if len(c.failures) > 0 || len(errs) > 0 || p <= latencyFactor*idle || attempt == attempts {
			checkOrdinary(c, lat, errs, idle)
			return
		}
		c.Logf("ordinary p99 %v, over %dx the idle %v: trying again", p.Round(time.Microsecond), latencyFactor, idle.Round(time.Microsecond))
	}
}

// once sends h with body to s once (see replay) and returns the ordinary users' latencies and
// failures during it.
func once(c *check, s *server, h hostile, body string, idle time.Duration) ([]time.Duration, []string) {
	load := startOrdinary(s)
	time.Sleep(20 * time.Millisecond)
	probe, err := startProbe(s.pid())
	if err != nil {
		load.finish(time.Now(), time.Now())
		c.Fatalf("%v", err)
	}
	start := time.Now()
	a := h.send(s, body)
	extra, memDesc, memErr := probe.end()
	lat, errs := load.finish(start, start.Add(caseWindow))
	defer afterCase(c, s)

	c.Logf("answered %d in %v; extra memory %s; ordinary p99 %v over %d requests (idle %v)",
		a.status, a.took.Round(time.Microsecond), memDesc, p99(lat).Round(time.Microsecond), len(lat), idle.Round(time.Microsecond))
	if h.mentions == nil {
		if a.err != nil || a.status != http.StatusOK {
			c.Errorf("status %d (%v), want 200: %s", a.status, a.err, tail(string(a.body), 500))
		}
	} else {
		checkRefusal(c, a, h.status, h.mentions)
	}
	if a.took > caseTime {
		c.Errorf("answered in %v, want under %v", a.took.Round(time.Millisecond), caseTime)
	}
	if memErr != nil {
		c.Errorf("%v", memErr)
	} else if extra > caseMemory {
		c.Errorf("the server's memory grew by %s, want under %s", memDesc, mib(caseMemory))
	}
	return lat, errs
}

// checkOrdinary checks the ordinary users' requests during a case: all answered, with a
// p99 within latencyFactor of the idle server's.
func checkOrdinary(c *check, lat []time.Duration, errs []string, idle time.Duration) {
	for _, e := range errs {
		c.Errorf("%s", e)
	}
	if len(lat) == 0 {
		c.Errorf("no ordinary request was answered during the case")
	} else if p := p99(lat); p > latencyFactor*idle {
		c.Errorf("ordinary requests' p99 %v during the case, want under %dx the idle %v", p.Round(time.Microsecond), latencyFactor, idle.Round(time.Microsecond))
	}
}

// afterCase checks the server survived the case, answers /health and has nothing left running.
func afterCase(c *check, s *server) {
	if _, err := s.health(); err != nil {
		s.waitExit(time.Second)
		if died := s.alive(); died != nil {
			c.Fatalf("%v", died)
		}
		c.Errorf("after the case: %v", err)
	}
	if _, err := s.waitIdle(-1, 2*time.Second); err != nil {
		c.Errorf("after the case: %v", err)
	}
}
