//go:build linux

package abuse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// The connection deadlines the connection cases start their server with: short, so that
// reclaiming 300 connections takes seconds. The flags are those helper A2 gave serve for
// issue 14 item 2 (the issue names the deadlines, not their flags).
const (
	headerTimeout = time.Second
	bodyTimeout   = 2 * time.Second
	writeTimeout  = 2 * time.Second
	idleTimeout   = 2 * time.Second
)

// deadlineFlags are the flags that set those deadlines.
var deadlineFlags = []string{
	"--header-timeout", headerTimeout.String(),
	"--body-timeout", bodyTimeout.String(),
	"--write-timeout", writeTimeout.String(),
	"--idle-timeout", idleTimeout.String(),
}

// reclaimSlack is how long past its deadline a connection may take to be reclaimed (the
// server's timers, a loaded 2-core machine).
const reclaimSlack = 2 * time.Second

// heldConns is how many hostile connections the connection cases hold at once.
const heldConns = 300

// TestConnections holds hostile connections against servers with short deadlines: stalled
// bodies, stream clients that stop reading, unauthenticated or oversized bodies that must be
// refused before they arrive, and more connections than the cap.
func TestConnections(t *testing.T) {
	model := trapModel(t)
	srv, startErr := startServer(append([]string{"-m", model}, deadlineFlags...)...)
	if startErr == nil {
		t.Cleanup(srv.stop)
	}
	withServer := func(fn func(c *check, s *server)) func(c *check) {
		return func(c *check) {
			if startErr != nil {
				c.Fatalf("%v", startErr)
			}
			if err := srv.alive(); err != nil {
				c.Fatalf("%v", err)
			}
			fn(c, srv)
		}
	}
	runCase(t, "stalled_bodies_300", withServer(stalledBodies))
	runCase(t, "non_reading_streams_300", withServer(nonReadingStreams))

	keyed := mustStart(t, "-m", model, "--api-key", "abuse-key")
	runCase(t, "stalled_body_without_key_gets_401_at_once", func(c *check) {
		earlyRefusal(c, keyed, requestHead(keyed, "/v1/completions", 1000, "")+`{"prompt":`, http.StatusUnauthorized)
	})
	runCase(t, "stalled_oversized_body_gets_413_at_once", func(c *check) {
		earlyRefusal(c, keyed, requestHead(keyed, "/v1/completions", 20<<20, "Authorization: Bearer abuse-key\r\n")+`{"prompt":`, http.StatusRequestEntityTooLarge)
	})
	runCase(t, "stalled_body_on_a_full_queue_gets_429_at_once", fullQueue)
	runCase(t, "connections_over_the_cap_get_503", func(c *check) { connectionCap(c, model) })
}

// baseline warms s up, closes the suite's connections to it, waits for it to be idle and
// returns its state then: the goroutines it has with no client connected.
func baseline(c *check, s *server) idleState {
	if err := warm(s); err != nil {
		c.Fatalf("%v", err)
	}
	ordinaryClient.CloseIdleConnections()
	// The server sees the closes: wait for two equal goroutine counts in a row.
	var last idleState
	for i := 0; ; i++ {
		st, err := s.waitIdle(-1, 5*time.Second)
		if err != nil {
			c.Fatalf("before the case: %v", err)
		}
		if i > 0 && st.goroutines == last.goroutines {
			return st
		}
		if i == 50 {
			c.Fatalf("before the case: the goroutine count does not settle (%v, then %v)", last.goroutines, st.goroutines)
		}
		last = st
		time.Sleep(50 * time.Millisecond)
	}
}

// checkHealthWhileHeld checks /health answers in under healthTime while connections are
// held. A slow round of probes is tried once more: on a shared machine a neighbour's burst
// can delay one answer, but not a server that cannot answer.
func checkHealthWhileHeld(c *check, s *server) {
	slowest, err := healthUnder(s, 10, 30*time.Millisecond)
	if err == nil && slowest > healthTime {
		c.Logf("/health took %v: probing once more", slowest.Round(time.Millisecond))
		slowest, err = healthUnder(s, 10, 30*time.Millisecond)
	}
	switch {
	case err != nil:
		c.Errorf("while the connections are held: %v", err)
	case slowest > healthTime:
		c.Errorf("/health took %v while the connections are held, want under %v", slowest.Round(time.Millisecond), healthTime)
	default:
		c.Logf("/health answered in at most %v while the connections are held", slowest.Round(time.Microsecond))
	}
}

// checkReclaimed checks s gets back to its baseline goroutines with nothing running and an
// empty KV cache by deadline, and returns the state then.
func checkReclaimed(c *check, s *server, base idleState, deadline time.Time) idleState {
	st, err := s.waitIdle(base.goroutines, time.Until(deadline))
	if err != nil {
		c.Errorf("the connections are not reclaimed: %v", err)
	} else {
		c.Logf("back to %v goroutines (baseline %v), KV usage %v", st.goroutines, base.goroutines, st.kvUsage)
	}
	return st
}

// stalledBodies sends 300 request heads announcing a 1000-byte body, then only its start:
// /health must keep answering, and the server must close each connection once the body-read
// deadline passes.
func stalledBodies(c *check, s *server) {
	base := baseline(c, s)
	head := requestHead(s, "/v1/completions", 1000, "") + `{"prompt":"Once upon`
	conns, err := openConns(s, heldConns, 0, func(int) string { return head })
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer closeAll(conns)
	sent := time.Now()
	checkHealthWhileHeld(c, s)
	deadline := sent.Add(bodyTimeout + reclaimSlack)
	if open := countOpen(conns, deadline); open > 0 {
		c.Errorf("%d of %d stalled connections still open %v after their bodies stalled (body deadline %v)", open, len(conns), time.Since(sent).Round(time.Millisecond), bodyTimeout)
	}
	checkReclaimed(c, s, base, time.Now().Add(reclaimSlack))
	if err := s.alive(); err != nil {
		c.Fatalf("%v", err)
	}
}

// nonReadingStreams starts 300 streams whose clients do not read: 296 short completions and
// 4 chats whose output (16 choices x 400 tokens x 20 alternatives, 11 MB each) cannot fit
// the sockets' buffers. /health must keep answering; all connections must be reclaimed
// within the write and idle deadlines, the KV cache emptied; the big streams must have been
// cut off (their clients, reading at last, find no [DONE]).
func nonReadingStreams(c *check, s *server) {
	const big = 4
	const bigChoices = 16
	base := baseline(c, s)
	small := `{"prompt":"Once upon a time","max_tokens":64,"ignore_eos":true,"stream":true}`
	large := fmt.Sprintf(`{"messages":[{"role":"user","content":"Tell me a story"}],"n":%d,"max_tokens":400,"ignore_eos":true,"logprobs":true,"top_logprobs":20,"stream":true}`, bigChoices)
	conns, err := openConns(s, heldConns, 4096, func(i int) string {
		if i < big {
			return requestHead(s, "/v1/chat/completions", len(large), "") + large
		}
		return requestHead(s, "/v1/completions", len(small), "") + small
	})
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer closeAll(conns)
	sent := time.Now()
	checkHealthWhileHeld(c, s)
	// Generating every stream takes a few seconds on two cores; then each connection has at
	// most its write deadline (a blocked stream) or its idle deadline (a finished one).
	checkReclaimed(c, s, base, sent.Add(writeTimeout+idleTimeout+10*time.Second))
	c.Logf("reclaimed %v after the requests were sent", time.Since(sent).Round(time.Millisecond))
	// Each client now reads what reached it: the start of a stream (or the case tested
	// nothing), and for the big ones a stream cut off, the connection closed before [DONE].
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got []byte
		var err error
		if i < big {
			got, err = io.ReadAll(conn)
		} else {
			got, err = bufio.NewReader(conn).ReadBytes('\n')
		}
		switch {
		case !bytes.HasPrefix(got, []byte("HTTP/1.1 200")):
			c.Fatalf("stream %d of %d began %q (%v), want a 200", i+1, len(conns), tail(string(got), 200), err)
		case i >= big:
		case err != nil:
			c.Errorf("big stream %d: reading what reached the client: %v", i+1, err)
		case bytes.Contains(got, []byte("data: [DONE]")):
			c.Errorf("big stream %d was not cut off: its client, which stopped reading, got all %d bytes", i+1, len(got))
		}
	}
	if err := s.alive(); err != nil {
		c.Fatalf("%v", err)
	}
}

// earlyRefusal sends head (a request head and the start of its body, which then stalls) and
// expects status within caseTime, with Connection: close and the connection closed, not
// held waiting for the rest of the body.
func earlyRefusal(c *check, s *server, head string, status int) {
	conn, err := dialRaw(s, 0)
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(head)); err != nil {
		c.Fatalf("%v", err)
	}
	a, err := readAnswer(conn, hostileTimeout)
	if err != nil {
		c.Fatalf("the body stalled: %v", err)
	}
	checkRefusal(c, a, status, nil)
	if a.took > caseTime {
		c.Errorf("answered in %v, want under %v", a.took.Round(time.Millisecond), caseTime)
	}
	if !a.close {
		c.Errorf("the %d has no Connection: close", a.status)
	}
	if !closedBy(conn, time.Now().Add(caseTime)) {
		c.Errorf("the connection is still open %v after the %d", caseTime, a.status)
	}
}

// fullQueue fills a server that runs one sequence and lets one wait (the built-in default
// model, slow enough that a 300-token stream runs for seconds), then sends a request whose
// body stalls: the server knows before the body that it cannot take it, so it must answer
// 429 at once and close the connection.
func fullQueue(c *check) {
	s, err := startServer("--max-num-seqs", "1", "--max-waiting", "1")
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer s.stop()
	busy := `{"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"stream":true}`
	// One request at a time, so that the second is not refused while the first still waits.
	for _, want := range []idleState{{running: 1}, {running: 1, waiting: 1}} {
		conns, err := openConns(s, 1, 0, func(int) string { return requestHead(s, "/v1/completions", len(busy), "") + busy })
		if err != nil {
			c.Fatalf("%v", err)
		}
		defer closeAll(conns)
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err := s.state()
			if err != nil {
				c.Fatalf("%v", err)
			}
			if st.running == want.running && st.waiting == want.waiting {
				break
			}
			if time.Now().After(deadline) {
				c.Fatalf("the queue did not fill: %v running, %v waiting, want %v and %v", st.running, st.waiting, want.running, want.waiting)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	earlyRefusal(c, s, requestHead(s, "/v1/completions", 1000, "")+`{"prompt":`, http.StatusTooManyRequests)
}

// connectionCap starts a server capped at a few connections, holds that many, and expects
// the next one answered 503 at once (and closed), then served again once they are gone.
func connectionCap(c *check, model string) {
	const capConns = 16
	s, err := startServer("-m", model, "--max-connections", fmt.Sprint(capConns))
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer s.stop()
	head := requestHead(s, "/v1/completions", 1000, "") + `{"prompt":`
	conns, err := openConns(s, capConns, 0, func(int) string { return head })
	if err != nil {
		c.Fatalf("%v", err)
	}
	time.Sleep(100 * time.Millisecond)
	extra, err := dialRaw(s, 0)
	if err != nil {
		closeAll(conns)
		c.Fatalf("%v", err)
	}
	fmt.Fprintf(extra, "GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", s.addr)
	a, err := readAnswer(extra, hostileTimeout)
	extra.Close()
	closeAll(conns)
	if err != nil {
		c.Fatalf("connection %d of a server capped at %d: %v", capConns+1, capConns, err)
	}
	if a.status != http.StatusServiceUnavailable {
		c.Errorf("connection %d of a server capped at %d: status %d, want 503: %s", capConns+1, capConns, a.status, tail(string(a.body), 300))
	}
	if a.took > caseTime {
		c.Errorf("the 503 took %v, want under %v", a.took.Round(time.Millisecond), caseTime)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.health(); err == nil {
			break
		} else if time.Now().After(deadline) {
			c.Fatalf("once the held connections closed, the server still refuses: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
