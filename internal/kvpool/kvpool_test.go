package kvpool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/redistest"
)

const testBlockBytes = 64

// testRefs returns n chained blocks of 4 tokens each and their keys and values.
func testRefs(n int, salt string) ([]kvcache.BlockRef, []byte) {
	toks := make([]int32, 4*n)
	for i := range toks {
		toks[i] = int32(i*7 + len(salt))
	}
	refs := kvcache.BlockRefs(toks, kvcache.ChainHashes(toks, 4, salt), 4, 0, n)
	kv := make([]byte, n*testBlockBytes)
	for i := range kv {
		kv[i] = byte(i*31 + len(salt))
	}
	return refs, kv
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestValueRoundTripAndChecks(t *testing.T) {
	refs, kv := testRefs(2, "s")
	v := encodeValue(refs[1], kv[testBlockBytes:])
	got, err := decodeValue(v, refs[1], testBlockBytes)
	if err != nil || !bytes.Equal(got, kv[testBlockBytes:]) {
		t.Fatalf("round trip: %v", err)
	}
	other := refs[1]
	other.Tokens = append([]int32(nil), other.Tokens...)
	other.Tokens[2]++
	for name, tc := range map[string]struct {
		v   []byte
		ref kvcache.BlockRef
		bb  int
	}{
		"flipped byte":   {flip(v, len(v)/2), refs[1], testBlockBytes},
		"flipped crc":    {flip(v, len(v)-1), refs[1], testBlockBytes},
		"truncated":      {v[:len(v)-5], refs[1], testBlockBytes},
		"empty":          {nil, refs[1], testBlockBytes},
		"another block":  {v, refs[0], testBlockBytes},
		"other tokens":   {v, other, testBlockBytes},
		"other geometry": {v, refs[1], testBlockBytes * 2},
	} {
		if _, err := decodeValue(tc.v, tc.ref, tc.bb); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: %v, want a corrupt value", name, err)
		}
	}
}

func flip(v []byte, i int) []byte {
	c := bytes.Clone(v)
	c[i] ^= 0x10
	return c
}

// FuzzDecodeValue: any bytes decode to an error or to exactly the block they were encoded
// from; never a panic.
func FuzzDecodeValue(f *testing.F) {
	refs, kv := testRefs(1, "")
	f.Add(encodeValue(refs[0], kv))
	f.Add([]byte("KVB1"))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, err := decodeValue(v, refs[0], testBlockBytes)
		if err == nil && !bytes.Equal(got, kv) {
			t.Fatalf("decoded %d bytes that are not the block's", len(got))
		}
	})
}

func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	b := &breaker{threshold: 2, cooldown: time.Second, now: func() time.Time { return now }}
	fail := errors.New("down")
	if !b.allow() {
		t.Fatal("closed breaker refused")
	}
	if o, _ := b.done(fail); o {
		t.Fatal("opened after one failure of two")
	}
	if o, _ := b.done(fail); !o || !b.isOpen() || b.allow() {
		t.Fatal("not open after two failures")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no trial call after the cool-down")
	}
	if b.allow() {
		t.Fatal("a second call while the trial is out")
	}
	if o, c := b.done(fail); o || c || b.allow() {
		t.Fatal("failed trial did not keep it open")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no second trial")
	}
	if _, c := b.done(nil); !c || b.isOpen() || !b.allow() {
		t.Fatal("a successful trial did not close it")
	}
}

func TestMemoryTierLRU(t *testing.T) {
	m := newMemoryTier(3 * testBlockBytes)
	refs, kv := testRefs(4, "")
	for i := range 3 {
		m.put(refs[i].Hash, kv[i*testBlockBytes:(i+1)*testBlockBytes])
	}
	m.get(refs[0].Hash) // 1 is now the least recently used
	m.put(refs[3].Hash, kv[3*testBlockBytes:])
	if m.get(refs[1].Hash) != nil {
		t.Error("the least recently used block survived")
	}
	for _, i := range []int{0, 2, 3} {
		if got := m.get(refs[i].Hash); !bytes.Equal(got, kv[i*testBlockBytes:(i+1)*testBlockBytes]) {
			t.Errorf("block %d lost", i)
		}
	}
	if n, b := m.size(); n != 3 || b != 3*testBlockBytes {
		t.Errorf("size %d blocks %d bytes", n, b)
	}
	m.put(refs[1].Hash, make([]byte, 4*testBlockBytes)) // larger than the budget
	if n, _ := m.size(); n != 3 {
		t.Errorf("an oversized block changed the tier: %d blocks", n)
	}
}

// TestHostTierBeforeRedis: a pool without Redis serves the longest run its host tier holds.
func TestHostTierOnly(t *testing.T) {
	p, err := New(Config{Namespace: "t", BlockBytes: testBlockBytes, OffloadBytes: 1 << 20, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	refs, kv := testRefs(3, "")
	p.Offload(refs[0].Hash, kv[:testBlockBytes])
	p.Offload(refs[2].Hash, kv[2*testBlockBytes:])
	got := p.Lookup(context.Background(), refs)
	if len(got) != 1 || !bytes.Equal(got[0], kv[:testBlockBytes]) {
		t.Fatalf("lookup gave %d blocks, want the first only (the second is missing)", len(got))
	}
	if s := p.Stats(); s.OffloadHits != 1 || s.OffloadMisses != 2 || s.OffloadBlocks != 2 || s.Up {
		t.Errorf("stats %+v", s)
	}
}

func newRedisPool(t *testing.T, url string) *Pool {
	t.Helper()
	p, err := New(Config{URL: url, Namespace: "test", BlockBytes: testBlockBytes, Timeout: 200 * time.Millisecond, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func flush(t *testing.T, p *Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRedisSaveLookup: blocks one pool saves, another finds, up to the first block not
// saved; a corrupt value is a miss, deleted from Redis.
func TestRedisSaveLookup(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newRedisPool(t, srv.URL()), newRedisPool(t, srv.URL())
	refs, kv := testRefs(5, "x")
	a.Save(refs[:3], bytes.Clone(kv[:3*testBlockBytes]))
	flush(t, a)
	got := b.Lookup(context.Background(), refs)
	if len(got) != 3 {
		t.Fatalf("found %d blocks, want 3", len(got))
	}
	for i, g := range got {
		if !bytes.Equal(g, kv[i*testBlockBytes:(i+1)*testBlockBytes]) {
			t.Fatalf("block %d: other bytes", i)
		}
	}
	if s := b.Stats(); s.Hits != 3 || s.Misses != 2 || s.ReadBytes == 0 || !s.Up || s.Errors != 0 {
		t.Errorf("reader stats %+v", s)
	}
	if s := a.Stats(); s.WrittenBytes == 0 || s.DroppedWrites != 0 {
		t.Errorf("writer stats %+v", s)
	}
	// Another salt, another chain: nothing.
	saltRefs, _ := testRefs(5, "y")
	if got := b.Lookup(context.Background(), saltRefs); len(got) != 0 {
		t.Errorf("another salt found %d blocks", len(got))
	}

	// Corrupt the second block's value in place: the run stops before it.
	key := a.Key(refs[1].Hash)
	if reply, err := srv.Do("SETRANGE", key, "60", "Z"); err != nil || reply != ":"+strconv.Itoa(len(encodeValue(refs[1], kv[:testBlockBytes]))) {
		t.Fatalf("SETRANGE: %q %v", reply, err)
	}
	if got := b.Lookup(context.Background(), refs); len(got) != 1 {
		t.Fatalf("found %d blocks past a corrupt one, want 1", len(got))
	}
	if s := b.Stats(); s.Corrupt != 1 {
		t.Errorf("corrupt %d, want 1", s.Corrupt)
	}
	flush(t, b)
	if reply, _ := srv.Do("EXISTS", key); reply != ":0" {
		t.Errorf("the corrupt value is still stored: EXISTS %s", reply)
	}
	// Saved again (a recompute), it serves again.
	a.Save(refs[1:2], bytes.Clone(kv[testBlockBytes:2*testBlockBytes]))
	flush(t, a)
	if got := b.Lookup(context.Background(), refs); len(got) != 3 {
		t.Fatalf("after the recompute: %d blocks, want 3", len(got))
	}
}

// TestRedisDown: with the server gone, lookups miss within the call timeouts, writes are
// dropped, the breaker opens (then refuses at once), and nothing blocks.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	p := newRedisPool(t, srv.URL())
	refs, kv := testRefs(2, "")
	p.Save(refs, bytes.Clone(kv))
	flush(t, p)
	srv.Kill()
	start := time.Now()
	for i := range 5 {
		if got := p.Lookup(context.Background(), refs); len(got) != 0 {
			t.Fatalf("lookup %d found %d blocks on a dead server", i, len(got))
		}
		p.Save(refs, bytes.Clone(kv))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("5 lookups on a dead server took %v", d)
	}
	flush(t, p)
	s := p.Stats()
	if s.Up || s.Errors < breakerThreshold || s.DroppedWrites == 0 {
		t.Errorf("stats after the server died: %+v", s)
	}
}

// TestRedisUnreachable: an address nobody listens on is a pool that misses, not an error.
func TestRedisUnreachable(t *testing.T) {
	p := newRedisPool(t, fmt.Sprintf("redis://127.0.0.1:%d", 1))
	refs, _ := testRefs(1, "")
	if got := p.Lookup(context.Background(), refs); len(got) != 0 {
		t.Fatal("found blocks on no server")
	}
	if p.Stats().Errors == 0 {
		t.Error("no error counted")
	}
	if _, err := New(Config{URL: "http://x", BlockBytes: 1}); err == nil {
		t.Error("an http:// URL was taken")
	}
}
