//go:build linux

package abuse

import (
	"encoding/json"
	"fmt"
	"io"
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

// hostileClient sends hostile requests, each on a connection of its own.
var hostileClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: hostileTimeout}

// answer is what a hostile request got.
type answer struct {
	status int
	header http.Header
	body   []byte // its first 64 KiB
	took   time.Duration
	err    error
}

// send sends h to s and reads at most 64 KiB of the answer.
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
	start := time.Now()
	res, err := hostileClient.Do(req)
	if err != nil {
		return answer{took: time.Since(start), err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return answer{status: res.StatusCode, header: res.Header, body: b, took: time.Since(start), err: err}
}

// checkRefusal checks that a is a 4xx (status when it is not 0) in OpenAI's error shape
// whose message, param or code matches mentions.
func checkRefusal(c *check, a answer, status int, mentions *regexp.Regexp) {
	if a.err != nil {
		c.Fatalf("no answer within %v: %v", hostileTimeout, a.err)
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

// target is the server the hostile requests go to, with its idle latency.
type target struct {
	srv  *server
	idle time.Duration
}

// replay sends h while ordinary users keep asking, and checks everything a case must meet:
// the refusal, its time, the server's extra memory, the ordinary users' latency and
// success, and a server alive, healthy and idle afterwards. A case that meets everything
// but the latency is tried once more after measuring the idle server again: on a shared
// machine a neighbour's burst can slow one window, but not a server that stalls on every
// such request.
func (tg *target) replay(c *check, h hostile) {
	body := ""
	if h.body != nil {
		body = h.body()
	}
	lat, errs := tg.once(c, h, body)
	if p := p99(lat); len(c.failures) == 0 && len(errs) == 0 && p > latencyFactor*tg.idle {
		c.Logf("ordinary p99 %v, over %dx the idle %v: measuring the idle server again, then one more try",
			p.Round(time.Microsecond), latencyFactor, tg.idle.Round(time.Microsecond))
		idle, err := idleP99(tg.srv, idleWindow/2)
		if err != nil {
			c.Fatalf("%v", err)
		}
		tg.idle = idle
		lat, errs = tg.once(c, h, body)
	}
	tg.checkOrdinary(c, lat, errs)
}

// once sends h with body once (see replay) and returns the ordinary users' latencies and
// failures during it.
func (tg *target) once(c *check, h hostile, body string) ([]time.Duration, []string) {
	load := startOrdinary(tg.srv)
	time.Sleep(20 * time.Millisecond)
	probe, err := startProbe(tg.srv.pid())
	if err != nil {
		load.finish(time.Now(), time.Now())
		c.Fatalf("%v", err)
	}
	start := time.Now()
	a := h.send(tg.srv, body)
	extra, memDesc, memErr := probe.end()
	lat, errs := load.finish(start, start.Add(caseWindow))
	defer tg.after(c)

	c.Logf("answered %d in %v; extra memory %s; ordinary p99 %v over %d requests (idle %v)",
		a.status, a.took.Round(time.Microsecond), memDesc, p99(lat).Round(time.Microsecond), len(lat), tg.idle.Round(time.Microsecond))
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
func (tg *target) checkOrdinary(c *check, lat []time.Duration, errs []string) {
	for _, e := range errs {
		c.Errorf("%s", e)
	}
	if len(lat) == 0 {
		c.Errorf("no ordinary request was answered during the case")
	} else if p := p99(lat); p > latencyFactor*tg.idle {
		c.Errorf("ordinary requests' p99 %v during the case, want under %dx the idle %v", p.Round(time.Microsecond), latencyFactor, tg.idle.Round(time.Microsecond))
	}
}

// after checks the server survived the case, answers /health and has nothing left running.
func (tg *target) after(c *check) {
	if _, err := tg.srv.health(); err != nil {
		tg.srv.waitExit(time.Second)
		if died := tg.srv.alive(); died != nil {
			c.Fatalf("%v", died)
		}
		c.Errorf("after the case: %v", err)
	}
	if _, err := tg.srv.waitIdle(-1, 2*time.Second); err != nil {
		c.Errorf("after the case: %v", err)
	}
}
