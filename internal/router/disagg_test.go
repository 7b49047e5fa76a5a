package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
	"github.com/kvasir-llm/kvasir/internal/server"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// These tests run prefill/decode disaggregation on loopback with a real model (stories260K):
// a prefill and a decode instance behind the router, against one colocated instance, and
// with faults injected into the KV transfer's connection.

// roleInstance is a kvasir serve instance of a role, in process, that a test can kill.
type roleInstance struct {
	eng  *kvasir.Engine
	ts   *httptest.Server
	rc   *kvtransfer.Receiver // decode only
	logs *syncBuffer          // its log lines
	dead atomic.Bool
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// transferTimeout is both sides' per-step transfer timeout in these tests.
const transferTimeout = 300 * time.Millisecond

// newRoleInstance starts an instance of role on stories260K; a prefill instance dials its
// transfers with dial (nil: plain TCP). edits change its server configuration.
func newRoleInstance(t *testing.T, role string, dial func(ctx context.Context, network, addr string) (net.Conn, error), edits ...func(*server.Config)) *roleInstance {
	t.Helper()
	return newSplitInstance(t, role, split{}, dial, edits...)
}

// split is how an instance's model is split over CPU ranks (0: not split).
type split struct{ tp, pp int }

func (s split) String() string { return fmt.Sprintf("tp%d-pp%d", max(s.tp, 1), max(s.pp, 1)) }

// newSplitInstance is newRoleInstance with the model split over CPU ranks as sp says (one
// thread a rank).
func newSplitInstance(t *testing.T, role string, sp split, dial func(ctx context.Context, network, addr string) (net.Conn, error), edits ...func(*server.Config)) *roleInstance {
	t.Helper()
	path := testdata.Path(t, "models/stories260K/stories260K.gguf")
	ev := server.NewKVEvents(0)
	metrics := server.NewMetrics("stories")
	eng, err := kvasir.Open(path, kvasir.Options{Threads: max(sp.tp, 1) * max(sp.pp, 1), TensorParallel: sp.tp, PipelineParallel: sp.pp,
		KVCacheMemory: 4 << 20, OnRequestDone: metrics.OnRequestDone, OnKVEvent: ev.Record})
	if err != nil {
		t.Fatal(err)
	}
	in := &roleInstance{eng: eng, logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(in.logs, nil))
	cfg := server.Config{ModelNames: []string{"stories"}, KVEvents: ev, Metrics: metrics, Logger: log, Role: role}
	switch role {
	case server.RolePrefill:
		// Two blocks a chunk: the prompts' blocks go out while their later chunks compute.
		cfg.KVSender, cfg.KVPrefillChunk = &kvtransfer.Sender{Timeout: transferTimeout, Dial: dial}, 32
	case server.RoleDecode:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		in.rc, err = kvtransfer.Listen(ln, kvtransfer.ReceiverConfig{Model: eng.ModelName(), BlockSize: eng.BlockSize(), Layers: eng.BlockLayers(),
			BlockBytes: eng.BlockBytes(), KVCacheDType: eng.KVCacheDType(), KVLayout: eng.KVLayout(), Timeout: transferTimeout, Logger: log, OnDone: metrics.ObserveReceived})
		if err != nil {
			t.Fatal(err)
		}
		cfg.KVReceiver, cfg.KVTransferAddress = in.rc, ln.Addr().String()
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	srv, err := server.New(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.dead.Load() {
			hangUp(w)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		in.kill()
		in.ts.Close()
		srv.Close()
		if in.rc != nil {
			in.rc.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	return in
}

// kill drops every connection of the instance and answers none, as a killed process.
func (in *roleInstance) kill() {
	in.dead.Store(true)
	in.ts.CloseClientConnections()
}

// newDisaggRouter starts a router over one prefill and one decode instance and waits until
// it knows the decode instance's transfer address.
func newDisaggRouter(t *testing.T, p, d *roleInstance) *httptest.Server {
	t.Helper()
	rt, err := New(Config{Backends: []string{d.ts.URL}, Prefill: []string{p.ts.URL}, PollInterval: 20 * time.Millisecond,
		PrefillTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(rt)
	t.Cleanup(func() {
		ts.Close()
		rt.Close()
	})
	waitFor(t, 5*time.Second, "instances healthy, transfer address known", func() bool {
		return rt.backends[0].healthy.Load() && rt.prefills[0].healthy.Load() && rt.backends[0].transferAddr() != ""
	})
	return ts
}

// disaggPrompts are prompts of two to four full blocks (16 tokens each) of stories260K.
var disaggPrompts = []string{
	"Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big tree",
	"Tom had a red ball. He liked to throw the ball to his dog. The dog was happy and ran after the ball every day. One day the ball went into the water and",
	"The sun was hot and the bird was thirsty. It flew to the pond to drink some water, but a big frog sat on a rock and",
}

// greedy asks url for a greedy completion of prompt, streamed or not, and returns its text.
func greedy(t *testing.T, url, prompt string, stream bool) string {
	t.Helper()
	body := map[string]any{"prompt": prompt, "max_tokens": 40, "temperature": 0}
	if stream {
		st := readStream(t, url+"/v1/completions", body)
		if !st.done || len(st.errs) > 0 {
			t.Fatalf("stream: done %v, errors %v", st.done, st.errs)
		}
		return st.text
	}
	var c completion
	post(t, url+"/v1/completions", body, &c)
	return c.Choices[0].Text
}

// colocated returns the greedy texts of disaggPrompts on one instance of role both.
func colocated(t *testing.T) []string {
	t.Helper()
	both := newRoleInstance(t, server.RoleBoth, nil)
	var want []string
	for _, p := range disaggPrompts {
		want = append(want, greedy(t, both.ts.URL, p, false))
	}
	return want
}

// checkKVIdle waits until every instance's KV cache holds no block.
func checkKVIdle(t *testing.T, ins ...*roleInstance) {
	t.Helper()
	for _, in := range ins {
		waitFor(t, 5*time.Second, "KV usage back to 0", func() bool { return in.eng.Stats().UsedBlocks == 0 })
	}
}

// checkGoroutines checks, once the test and every cleanup registered after this call have
// run (the instances and the router closed), that the goroutines are back to their count
// now.
func checkGoroutines(t *testing.T) {
	baseline := runtime.NumGoroutine()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		waitGoroutines(t, baseline, 5*time.Second)
	})
}

// TestDisaggregatedEqualsColocated checks that greedy outputs through a prefill and a
// decode instance equal one colocated instance's token for token, streamed and not, with
// the KV sent layer by layer as computed and chunk by chunk, that the decode instance took
// every prompt's blocks from the transfer, and that nothing is left behind.
func TestDisaggregatedEqualsColocated(t *testing.T) {
	want := colocated(t)
	for _, chunks := range []bool{false, true} {
		name := map[bool]string{false: "layers", true: "chunks"}[chunks]
		t.Run(name, func(t *testing.T) {
			checkGoroutines(t)
			p := newRoleInstance(t, server.RolePrefill, nil, func(c *server.Config) { c.KVStreamChunks = chunks })
			d := newRoleInstance(t, server.RoleDecode, nil)
			ts := newDisaggRouter(t, p, d)
			checkDisaggGreedy(t, ts.URL, want, 0)
			// The second run of a prompt skips the prefill when the router has seen the
			// decode instance's events of the first.
			checkAllTaken(t, d)
			checkKVIdle(t, p, d)
		})
	}
}

// checkDisaggGreedy checks that the greedy outputs of disaggPrompts[from:] through the
// router at url, streamed and not, equal the colocated ones (want).
func checkDisaggGreedy(t *testing.T, url string, want []string, from int) {
	t.Helper()
	for i, prompt := range disaggPrompts[from:] {
		i += from
		for _, stream := range []bool{false, true} {
			if got := greedy(t, url, prompt, stream); got != want[i] {
				t.Errorf("prompt %d (stream %v): disaggregated %q, colocated %q", i, stream, got, want[i])
			}
		}
	}
}

// checkAllTaken checks that the decode instance d received a transfer for each of
// disaggPrompts at least, took every one, and holds none.
func checkAllTaken(t *testing.T, d *roleInstance) {
	t.Helper()
	if st := d.rc.Stats(); st.Received < int64(len(disaggPrompts)) || st.Taken != st.Received || st.Failed != 0 || st.HeldBytes != 0 {
		t.Errorf("receiver: %+v, want at least %d transfers, each taken, none failed or held", st, len(disaggPrompts))
	}
}

// TestDisaggSplitPrefillEqualsColocated: a prefill instance whose model is split by tensor,
// by pipeline or by both (CPU ranks) streams every (block, layer) part as it is computed,
// each rank's piece of a layer read as that rank computes it, and greedy outputs through it
// and a decode instance equal one unsplit colocated instance's; every transfer is taken and
// no block is left held. The decode instance's model is split as the prefill's by tensor
// (the blocks' bytes keep each rank's KV heads apart, so the two must agree), and not split
// when the prefill's is only by pipeline (whose blocks' bytes are the unsplit model's).
func TestDisaggSplitPrefillEqualsColocated(t *testing.T) {
	want := colocated(t)
	for _, c := range []struct{ prefill, decode split }{
		{split{tp: 2}, split{tp: 2}},
		{split{pp: 2}, split{}},
		{split{tp: 2, pp: 2}, split{tp: 2, pp: 2}},
	} {
		t.Run(c.prefill.String(), func(t *testing.T) {
			checkGoroutines(t)
			p := newSplitInstance(t, server.RolePrefill, c.prefill, nil)
			d := newSplitInstance(t, server.RoleDecode, c.decode, nil)
			if !p.eng.StreamsLayers() {
				t.Fatal("a split CPU prefill instance does not stream layers")
			}
			// Straight to the prefill endpoint first: every part went out as computed.
			var res struct {
				NumBlocks      int `json:"num_blocks"`
				LayersStreamed int `json:"layers_streamed"`
			}
			if status := postPrefill(t, p.ts.URL, "split-0", d.rc.Addr().String(), disaggPrompts[0], &res); status != http.StatusOK || res.NumBlocks < 2 {
				t.Fatalf("prefill: status %d, %d blocks", status, res.NumBlocks)
			}
			if layers := p.eng.BlockLayers(); res.LayersStreamed != res.NumBlocks*layers {
				t.Errorf("%d parts streamed as computed, want every one of %d blocks x %d layers", res.LayersStreamed, res.NumBlocks, layers)
			}
			if got, ok := d.rc.Take("split-0"); !ok || len(got.Hashes) != res.NumBlocks {
				t.Fatal("the transfer is not held whole")
			}
			ts := newDisaggRouter(t, p, d)
			checkDisaggGreedy(t, ts.URL, want, 1) // prompt 0 is cached on the prefill instance: its blocks are read out of the cache
			checkAllTaken(t, d)
			checkKVIdle(t, p, d)
		})
	}
}

// TestDisaggSplitLayoutRefused: a tensor-parallel prefill instance's blocks have as many
// bytes as an unsplit decode instance's but keep each rank's KV heads apart, so the decode
// instance refuses the transfer (naming the layouts) rather than import KV that means
// something else, and computes the prompt itself: the output is still the colocated one.
func TestDisaggSplitLayoutRefused(t *testing.T) {
	want := colocated(t)
	checkGoroutines(t)
	p := newSplitInstance(t, server.RolePrefill, split{tp: 2}, nil)
	d := newRoleInstance(t, server.RoleDecode, nil)
	if p.eng.BlockBytes() != d.eng.BlockBytes() {
		t.Fatalf("block bytes %d and %d: the test wants a split that keeps them", p.eng.BlockBytes(), d.eng.BlockBytes())
	}
	var res struct{ Error struct{ Message string } }
	if status := postPrefill(t, p.ts.URL, "layout-0", d.rc.Addr().String(), disaggPrompts[0], &res); status != http.StatusBadGateway || !strings.Contains(res.Error.Message, "tp2-pp1") {
		t.Fatalf("prefill to an unsplit decode instance: status %d, %q, want 502 naming the layout", status, res.Error.Message)
	}
	ts := newDisaggRouter(t, p, d)
	if got := greedy(t, ts.URL, disaggPrompts[1], false); got != want[1] {
		t.Errorf("%q after the refused transfer, colocated %q", got, want[1])
	}
	if st := d.rc.Stats(); st.Taken != 0 || st.Failed != 2 || st.HeldBytes != 0 {
		t.Errorf("receiver: %+v, want two refused transfers, none taken or held", st)
	}
	checkKVIdle(t, p, d)
}

// TestDisaggSplitStalledTransfer: a tensor-parallel prefill instance's layer stream that
// stalls after its first bytes is cut by both sides' timeouts, the decode instance computes
// the prompt, and no block is left held.
func TestDisaggSplitStalledTransfer(t *testing.T) {
	f := &faultDialer{after: 1024}
	f.fault = func(c *faultConn, b []byte) (int, error) {
		time.Sleep(time.Until(time.Unix(0, c.writeDeadline.Load())))
		return 0, os.ErrDeadlineExceeded
	}
	runSplitFault(t, f, split{tp: 2})
}

// TestDisaggSplitCorruptBlock: a byte flipped in a tensor-parallel prefill instance's layer
// stream is caught by the receiver's checksum and the decode instance computes the prompt.
func TestDisaggSplitCorruptBlock(t *testing.T) {
	f := corruptingDialer()
	_, d := runSplitFault(t, f, split{tp: 2, pp: 2})
	if !strings.Contains(d.logs.String(), "checksum") {
		t.Errorf("the decode instance's log names no checksum failure:\n%s", d.logs)
	}
}

// TestKVPrefillLayersStreamed checks what a prefill instance reports of a transfer: every
// (block, layer) part sent as its layer was computed on a CPU instance streaming layers,
// none with --kv-transfer-stream chunks; for a prompt whose blocks it holds cached already
// fewer (a cached block is read out of the cache; the last block of each chunk is
// computed again for its logits), each transfer taken whole.
func TestKVPrefillLayersStreamed(t *testing.T) {
	d := newRoleInstance(t, server.RoleDecode, nil)
	layers := d.eng.BlockLayers()
	for _, c := range []struct {
		chunks bool
		// ok says whether streamed parts of the k-th transfer of the prompt are right.
		ok func(k, streamed, blocks int) bool
	}{
		{false, func(k, streamed, n int) bool { return k == 0 && streamed == n*layers || k == 1 && streamed < n*layers }},
		{true, func(_, streamed, _ int) bool { return streamed == 0 }},
	} {
		p := newRoleInstance(t, server.RolePrefill, nil, func(cfg *server.Config) { cfg.KVStreamChunks = c.chunks })
		for k := range 2 {
			id := fmt.Sprintf("s-%v-%d", c.chunks, k)
			var res struct {
				NumBlocks      int `json:"num_blocks"`
				LayersStreamed int `json:"layers_streamed"`
			}
			status := postPrefill(t, p.ts.URL, id, d.rc.Addr().String(), disaggPrompts[1], &res)
			if status != http.StatusOK || res.NumBlocks < 2 {
				t.Fatalf("chunks %v, transfer %d: status %d, %d blocks", c.chunks, k, status, res.NumBlocks)
			}
			if !c.ok(k, res.LayersStreamed, res.NumBlocks) {
				t.Errorf("chunks %v, transfer %d: %d parts streamed of %d blocks of %d layers", c.chunks, k, res.LayersStreamed, res.NumBlocks, layers)
			}
			got, ok := d.rc.Take(id)
			if !ok || len(got.Hashes) != res.NumBlocks {
				t.Fatalf("chunks %v, transfer %d: not held whole", c.chunks, k)
			}
		}
		checkKVIdle(t, p)
	}
}

// postPrefill posts prompt (a text or token ids) to a prefill instance's
// /v1/kv_prefill/completions for a transfer id to target, decodes its answer into res and
// returns its status.
func postPrefill(t *testing.T, url, id, target string, prompt, res any) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 4})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/kv_prefill/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.TransferHeader, id)
	req.Header.Set(server.TransferTargetHeader, target)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(res); err != nil {
		t.Fatal(err)
	}
	return r.StatusCode
}

// faultDialer dials plain TCP connections whose writes a test breaks once after `after`
// bytes.
type faultDialer struct {
	after int64
	// fault is called, once a connection, instead of the write that passes after; it
	// returns that write's result.
	fault func(c *faultConn, p []byte) (int, error)
	armed atomic.Bool
}

func (f *faultDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, f: f}, nil
}

// faultConn counts the bytes written and calls its dialer's fault once they pass after.
type faultConn struct {
	net.Conn
	f             *faultDialer
	written       int64
	tripped       bool         // the fault was called
	writeDeadline atomic.Int64 // unix nanoseconds (SetDeadline may come from another goroutine)
}

func (c *faultConn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline.Store(t.UnixNano())
	return c.Conn.SetWriteDeadline(t)
}

func (c *faultConn) SetDeadline(t time.Time) error {
	c.writeDeadline.Store(t.UnixNano())
	return c.Conn.SetDeadline(t)
}

func (c *faultConn) Write(p []byte) (int, error) {
	if c.f.armed.Load() && !c.tripped && c.written+int64(len(p)) > c.f.after {
		c.tripped = true
		return c.f.fault(c, p)
	}
	c.written += int64(len(p))
	return c.Conn.Write(p)
}

// runFault sends every prompt through a router over a prefill instance dialing with f and
// a decode instance, and checks that each answer equals the colocated one although every
// transfer failed (the decode instance computed the prompts), and that nothing is left
// behind on the live instances. It returns the decode instance.
func runFault(t *testing.T, f *faultDialer) (p, d *roleInstance) {
	return runSplitFault(t, f, split{})
}

// runSplitFault is runFault with both instances' models split as sp says.
func runSplitFault(t *testing.T, f *faultDialer, sp split) (p, d *roleInstance) {
	want := colocated(t)
	checkGoroutines(t)
	p, d = newSplitInstance(t, server.RolePrefill, sp, f.dial), newSplitInstance(t, server.RoleDecode, sp, nil)
	ts := newDisaggRouter(t, p, d)
	f.armed.Store(true)
	for i, prompt := range disaggPrompts {
		if got := greedy(t, ts.URL, prompt, true); got != want[i] {
			t.Errorf("prompt %d: %q after the failed transfer, colocated %q", i, got, want[i])
		}
	}
	st := d.rc.Stats()
	if st.Taken != 0 || st.Failed == 0 || st.HeldBytes != 0 {
		t.Errorf("receiver: %+v, want failed transfers, none taken or held", st)
	}
	checkKVIdle(t, p, d)
	return p, d
}

// TestDisaggPrefillKilledMidTransfer kills the prefill instance half-way through its first
// block: the decode instance computes the prompt and the request succeeds.
func TestDisaggPrefillKilledMidTransfer(t *testing.T) {
	var p *roleInstance
	f := &faultDialer{after: 2048}
	var once sync.Once
	f.fault = func(c *faultConn, b []byte) (int, error) {
		once.Do(func() {
			p.kill()
			c.Conn.Close()
		})
		return 0, net.ErrClosed
	}
	// p is set before the fault can fire: f is armed after the instances start.
	want := colocated(t)
	checkGoroutines(t)
	p = newRoleInstance(t, server.RolePrefill, f.dial)
	d := newRoleInstance(t, server.RoleDecode, nil)
	ts := newDisaggRouter(t, p, d)
	f.armed.Store(true)
	if got := greedy(t, ts.URL, disaggPrompts[0], true); got != want[0] {
		t.Errorf("%q after the prefill instance died, colocated %q", got, want[0])
	}
	if st := d.rc.Stats(); st.Taken != 0 || st.Failed != 1 || st.HeldBytes != 0 {
		t.Errorf("receiver: %+v, want one failed transfer, none taken or held", st)
	}
	// The router saw the prefill instance go: the next request goes straight to decode.
	if got := greedy(t, ts.URL, disaggPrompts[1], false); got != want[1] {
		t.Errorf("%q with the prefill instance down, colocated %q", got, want[1])
	}
	checkKVIdle(t, d)
}

// corruptingDialer returns a dialer whose connections, once armed, flip one bit of the byte
// at offset 4096 of what they write (a byte of a block in transit) and write the rest as
// it is.
func corruptingDialer() *faultDialer {
	f := &faultDialer{after: 4096}
	f.fault = func(c *faultConn, b []byte) (int, error) {
		bad := bytes.Clone(b)
		bad[c.f.after-c.written] ^= 0x40
		c.written += int64(len(b))
		return c.Conn.Write(bad)
	}
	return f
}

// TestDisaggCorruptBlock flips one byte of a block in transit: the receiver's checksum
// catches it, the transfer is refused, and the decode instance computes the prompt.
func TestDisaggCorruptBlock(t *testing.T) {
	f := corruptingDialer()
	_, d := runFault(t, f)
	if !strings.Contains(d.logs.String(), "checksum") {
		t.Errorf("the decode instance's log names no checksum failure:\n%s", d.logs)
	}
}

// TestDisaggStalledTransfer stalls the transfer after its first bytes: both sides time
// out, and the decode instance computes the prompt.
func TestDisaggStalledTransfer(t *testing.T) {
	f := &faultDialer{after: 1024}
	f.fault = func(c *faultConn, b []byte) (int, error) {
		time.Sleep(time.Until(time.Unix(0, c.writeDeadline.Load())))
		return 0, os.ErrDeadlineExceeded
	}
	start := time.Now()
	runFault(t, f)
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("stalled transfers took %v: the timeouts did not cut them", el)
	}
}

// TestKVPrefillEndpoint checks the instances' side of the handshake: GET /v1/kv_transfer
// names each role (and the decode instance's address), and POST /v1/kv_prefill/... is only
// a prefill instance's, refuses a request without its headers or with a bad target, and
// answers 502 when the transfer cannot be made, leaving no block pinned.
func TestKVPrefillEndpoint(t *testing.T) {
	p, d, both := newRoleInstance(t, server.RolePrefill, nil), newRoleInstance(t, server.RoleDecode, nil), newRoleInstance(t, server.RoleBoth, nil)
	for _, c := range []struct {
		in         *roleInstance
		role, addr string
	}{{p, "prefill", ""}, {d, "decode", d.rc.Addr().String()}, {both, "both", ""}} {
		var info struct{ Role, Address string }
		res, err := http.Get(c.in.ts.URL + "/v1/kv_transfer")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(res.Body).Decode(&info)
		res.Body.Close()
		if err != nil || info.Role != c.role || info.Address != c.addr {
			t.Errorf("GET /v1/kv_transfer of a %s instance: %+v (%v), want role %s, address %q", c.role, info, err, c.role, c.addr)
		}
	}
	body := `{"prompt": "` + disaggPrompts[0] + `", "max_tokens": 4}`
	prefill := func(url string, hdr map[string]string, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/kv_prefill/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}
	ok := map[string]string{server.TransferHeader: "t1", server.TransferTargetHeader: d.rc.Addr().String()}
	for _, c := range []struct {
		name   string
		url    string
		hdr    map[string]string
		body   string
		status int
		want   string
	}{
		{"not a prefill instance", both.ts.URL, ok, body, http.StatusNotFound, "not a prefill instance"},
		{"no headers", p.ts.URL, nil, body, http.StatusBadRequest, server.TransferHeader},
		{"bad target", p.ts.URL, map[string]string{server.TransferHeader: "t2", server.TransferTargetHeader: "nowhere"}, body, http.StatusBadRequest, "host:port"},
		{"bad body", p.ts.URL, ok, `{"prompt": 7}`, http.StatusBadRequest, "prompt"},
		{"unreachable target", p.ts.URL, map[string]string{server.TransferHeader: "t3", server.TransferTargetHeader: "127.0.0.1:1"}, body, http.StatusBadGateway, "kv_transfer_failed"},
		{"no full block", p.ts.URL, map[string]string{server.TransferHeader: "t4", server.TransferTargetHeader: d.rc.Addr().String()}, `{"prompt": "Once"}`, http.StatusBadGateway, "no full block"},
		{"ok", p.ts.URL, ok, body, http.StatusOK, `"transfer_id":"t1"`},
		{"an id held already", p.ts.URL, ok, body, http.StatusBadGateway, "held already"},
	} {
		status, raw := prefill(c.url, c.hdr, c.body)
		if status != c.status || !strings.Contains(raw, c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, status, raw, c.status, c.want)
		}
	}
	if _, ok := d.rc.Take("t1"); !ok {
		t.Error("the decode instance does not hold the transfer acknowledged")
	}
	checkKVIdle(t, p, d, both)
}
