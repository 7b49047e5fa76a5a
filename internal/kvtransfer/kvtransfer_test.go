package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// memSource serves blocks from memory.
type memSource [][]byte

func (m memSource) ReadBlock(_ context.Context, i int, dst []byte) error {
	copy(dst, m[i])
	return nil
}

// testBlocks makes n blocks of size bytes with distinct contents and hashes.
func testBlocks(n, size int) (memSource, []kvcache.BlockHash) {
	src := make(memSource, n)
	hashes := make([]kvcache.BlockHash, n)
	for i := range n {
		src[i] = bytes.Repeat([]byte{byte(i + 1)}, size)
		src[i][size/2] = byte(i * 7)
		hashes[i][0], hashes[i][15] = byte(i), 0xAB
	}
	return src, hashes
}

// newTestReceiver starts a receiver on loopback for blocks of 16 tokens and size bytes.
func newTestReceiver(t *testing.T, size int, cfg ReceiverConfig) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model, cfg.BlockSize, cfg.BlockBytes = "m", 16, size
	if cfg.KVCacheDType == "" {
		cfg.KVCacheDType = "int8"
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	r, err := Listen(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestSendReceive(t *testing.T) {
	const size = 1000
	r := newTestReceiver(t, size, ReceiverConfig{})
	src, hashes := testBlocks(3, size)
	s := &Sender{Timeout: time.Second}
	h := Header{ID: "t1", Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 3}
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, src); err != nil {
		t.Fatal(err)
	}
	got, ok := r.Take("t1")
	if !ok {
		t.Fatal("transfer not held after its acknowledgement")
	}
	for i := range 3 {
		if got.Hashes[i] != hashes[i] || !bytes.Equal(got.Data[i*size:(i+1)*size], src[i]) {
			t.Fatalf("block %d differs", i)
		}
	}
	if _, ok := r.Take("t1"); ok {
		t.Fatal("a transfer taken twice")
	}
	// The same id again, and transfers the receiver must refuse.
	for _, c := range []struct {
		h    Header
		want string
	}{
		{Header{ID: "t2", Model: "other", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 3}, "model"},
		{Header{ID: "t3", Model: "m", BlockSize: 32, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 3}, "blocks of 32 tokens"},
		{Header{ID: "t4", Model: "m", BlockSize: 16, BlockBytes: size + 1, KVCacheDType: "int8", NumBlocks: 3}, "bytes"},
		// An fp8 cache's blocks are the size of an int8 cache's, but not its bytes.
		{Header{ID: "t5", Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "fp8_e4m3", NumBlocks: 3}, "a kv cache of fp8_e4m3 elements, this instance's holds int8"},
	} {
		src := src
		if c.h.BlockBytes != size {
			src, _ = testBlocks(3, c.h.BlockBytes)
		}
		err := s.Send(context.Background(), r.Addr().String(), c.h, hashes, src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.h, err, c.want)
		}
	}
	st := r.Stats()
	if st.Received != 1 || st.Taken != 1 || st.HeldBytes != 0 || st.Bytes != 3*size || st.Failed != 4 {
		t.Errorf("stats %+v", st)
	}
}

// TestReceiverBounds checks the held-bytes limit and the TTL.
func TestReceiverBounds(t *testing.T) {
	const size = 100
	r := newTestReceiver(t, size, ReceiverConfig{MaxHeldBytes: 5 * size, TTL: 100 * time.Millisecond})
	src, hashes := testBlocks(3, size)
	s := &Sender{Timeout: time.Second}
	h := Header{ID: "a", Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 3}
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, src); err != nil {
		t.Fatal(err)
	}
	h.ID = "b"
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, src); !errors.Is(err, ErrRefused) {
		t.Fatalf("a transfer past the held-bytes limit: %v, want a refusal", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().Expired == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a held transfer did not expire")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := r.Take("a"); ok || r.Stats().HeldBytes != 0 {
		t.Fatalf("expired transfer still held: %+v", r.Stats())
	}
	// Room again.
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, src); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptBlockRefused flips one bit of a block on the wire.
func TestCorruptBlockRefused(t *testing.T) {
	const size = 512
	r := newTestReceiver(t, size, ReceiverConfig{})
	src, hashes := testBlocks(2, size)
	var wire bytes.Buffer
	h := Header{ID: "c", Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 2}
	if err := writeTransfer(&wire, h, hashes, src); err != nil {
		t.Fatal(err)
	}
	b := wire.Bytes()
	b[len(b)-frameHead-size/2] ^= 1 // inside block 1's bytes
	conn, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	var ack Ack
	if err := readJSONFrame(conn, FrameAck, &ack); err != nil {
		t.Fatal(err)
	}
	if ack.OK || !strings.Contains(ack.Error, "checksum") {
		t.Fatalf("ack %+v, want a checksum refusal", ack)
	}
	if _, ok := r.Take("c"); ok {
		t.Fatal("a corrupt transfer is held")
	}
}

// TestStalledSender checks that a sender that stops mid-transfer loses it after the
// receiver's timeout, and that a receiver that never acknowledges fails the sender after
// its own.
func TestStalledSender(t *testing.T) {
	const size = 256
	r := newTestReceiver(t, size, ReceiverConfig{Timeout: 100 * time.Millisecond})
	src, hashes := testBlocks(2, size)
	var wire bytes.Buffer
	h := Header{ID: "s", Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 2}
	if err := writeTransfer(&wire, h, hashes, src); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(wire.Bytes()[:wire.Len()/2])
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ack Ack
	if err := readJSONFrame(conn, FrameAck, &ack); err != nil || ack.OK {
		t.Fatalf("stalled transfer: ack %+v, %v; want a refusal after the timeout", ack, err)
	}

	// A receiver that reads everything and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	start := time.Now()
	err = (&Sender{Timeout: 100 * time.Millisecond}).Send(context.Background(), ln.Addr().String(), h, hashes, src)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("silent receiver: %v after %v, want a timeout", err, time.Since(start))
	}
}

// writeTransfer writes a whole transfer as a sender does, without the acknowledgement.
func writeTransfer(w io.Writer, h Header, hashes []kvcache.BlockHash, src memSource) error {
	if _, err := io.WriteString(w, Magic); err != nil {
		return err
	}
	if err := writeJSONFrame(w, FrameHeader, h); err != nil {
		return err
	}
	for i := range h.NumBlocks {
		if err := writeBlock(w, i, hashes[i], src[i]); err != nil {
			return err
		}
	}
	return writeFrame(w, FrameEnd)
}

// readTransfer parses a transfer from r as the receiver does, with blocks of at most
// maxBlock bytes.
func readTransfer(r io.Reader, maxBlock int) (Header, []Block, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return h, nil, err
	}
	if h.BlockBytes > maxBlock || h.NumBlocks > 64 {
		return h, nil, errors.New("too big for the test")
	}
	var blocks []Block
	for i := range h.NumBlocks {
		b, err := ReadBlock(r, i, h.BlockBytes, make([]byte, h.BlockBytes))
		if err != nil {
			return h, nil, err
		}
		blocks = append(blocks, b)
	}
	return h, blocks, ReadEnd(r)
}

// FuzzReadTransfer feeds the frame parser arbitrary bytes: it must never panic, and what
// it accepts must be a well-formed transfer whose blocks pass their checksums and which
// writes back to the same bytes.
func FuzzReadTransfer(f *testing.F) {
	src, hashes := testBlocks(2, 8)
	var wire bytes.Buffer
	writeTransfer(&wire, Header{ID: "x", Model: "m", BlockSize: 16, BlockBytes: 8, KVCacheDType: "int8", NumBlocks: 2}, hashes, src)
	f.Add(wire.Bytes())
	f.Add([]byte(Magic + "H\x00\x00\x00\x02{}"))
	f.Add([]byte("KVX1B\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, blocks, err := readTransfer(bytes.NewReader(data), 1<<12)
		if err != nil {
			return
		}
		if err := h.check(); err != nil {
			t.Fatalf("accepted header %+v: %v", h, err)
		}
		var again bytes.Buffer
		src := make(memSource, len(blocks))
		hs := make([]kvcache.BlockHash, len(blocks))
		for i, b := range blocks {
			if Checksum(b.Data) != b.CRC || b.Index != i {
				t.Fatalf("accepted block %d: index %d, bad checksum", i, b.Index)
			}
			src[i], hs[i] = b.Data, b.Hash
		}
		if err := writeTransfer(&again, h, hs, src); err != nil {
			t.Fatal(err)
		}
		if _, back, err := readTransfer(bytes.NewReader(again.Bytes()), 1<<12); err != nil || len(back) != len(blocks) {
			t.Fatalf("a transfer written back does not read: %v", err)
		}
	})
}

// slowSource waits before each block after the first, as a prefill computing the next chunk.
type slowSource struct {
	memSource
	wait time.Duration
}

func (s slowSource) ReadBlock(ctx context.Context, i int, dst []byte) error {
	if i > 0 {
		select {
		case <-time.After(s.wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.memSource.ReadBlock(ctx, i, dst)
}

// TestKeepalive checks that a sender whose source waits longer than the timeouts keeps the
// transfer alive with keepalive frames, and that the receiver's bound on a whole transfer
// still ends one kept alive too long.
func TestKeepalive(t *testing.T) {
	const size = 64
	src, hashes := testBlocks(3, size)
	s := &Sender{Timeout: 100 * time.Millisecond}
	h := Header{ID: "k", Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: 3}
	r := newTestReceiver(t, size, ReceiverConfig{Timeout: 100 * time.Millisecond})
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, slowSource{src, 350 * time.Millisecond}); err != nil {
		t.Fatalf("a slow source kept alive: %v", err)
	}
	if got, ok := r.Take("k"); !ok || !bytes.Equal(got.Data[2*size:], src[2]) {
		t.Fatal("the transfer kept alive is not held whole")
	}
	short := newTestReceiver(t, size, ReceiverConfig{Timeout: 100 * time.Millisecond, MaxDuration: 300 * time.Millisecond})
	if err := s.Send(context.Background(), short.Addr().String(), h, hashes, slowSource{src, 400 * time.Millisecond}); err == nil {
		t.Fatal("a transfer past the receiver's MaxDuration succeeded")
	}
}
