package kvtransfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// testLayers is the layers of a block in the tests.
const testLayers = 4

// memSource serves the layers of blocks from memory, layer after layer of all blocks (the
// order of a prefill of one chunk), or in the order of its parts when set.
type memSource struct {
	blocks [][]byte
	layers int      // a block's layers
	parts  [][2]int // (block, layer) in the order given
	next   int
}

// newMemSource serves blocks of testLayers layers layer after layer.
func newMemSource(blocks [][]byte) *memSource { return layerMajor(blocks, testLayers) }

// layerMajor serves blocks of layers layers, layer after layer.
func layerMajor(blocks [][]byte, layers int) *memSource {
	m := &memSource{blocks: blocks, layers: layers}
	for l := range layers {
		for b := range blocks {
			m.parts = append(m.parts, [2]int{b, l})
		}
	}
	return m
}

func (m *memSource) Next(_ context.Context, dst []byte) (int, int, error) {
	if m.next == len(m.parts) {
		return 0, 0, io.EOF
	}
	p := m.parts[m.next]
	m.next++
	lb := len(m.blocks[p[0]]) / m.layers
	copy(dst, m.blocks[p[0]][p[1]*lb:][:lb])
	return p[0], p[1], nil
}

// testBlocks makes n blocks of size bytes with distinct contents and hashes.
func testBlocks(n, size int) ([][]byte, []kvcache.BlockHash) {
	src := make([][]byte, n)
	hashes := make([]kvcache.BlockHash, n)
	for i := range n {
		src[i] = bytes.Repeat([]byte{byte(i + 1)}, size)
		for l := range testLayers {
			src[i][l*size/testLayers] = byte(i*7 + l)
		}
		hashes[i][0], hashes[i][15] = byte(i), 0xAB
	}
	return src, hashes
}

// testHeader is the header of a transfer of n blocks of size bytes as the test receivers
// take them.
func testHeader(id string, n, size int) Header {
	return Header{ID: id, Model: "m", BlockSize: 16, BlockBytes: size, KVCacheDType: "int8", NumBlocks: n, NumLayers: testLayers}
}

// newTestReceiver starts a receiver on loopback for blocks of 16 tokens and size bytes.
func newTestReceiver(t *testing.T, size int, cfg ReceiverConfig) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model, cfg.BlockSize, cfg.BlockBytes, cfg.Layers = "m", 16, size, testLayers
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
	blocks, hashes := testBlocks(3, size)
	s := &Sender{Timeout: time.Second}
	if err := s.Send(context.Background(), r.Addr().String(), testHeader("t1", 3, size), hashes, newMemSource(blocks)); err != nil {
		t.Fatal(err)
	}
	got, ok := r.Take("t1")
	if !ok {
		t.Fatal("transfer not held after its acknowledgement")
	}
	for i := range 3 {
		if got.Hashes[i] != hashes[i] || !bytes.Equal(got.Data[i*size:(i+1)*size], blocks[i]) {
			t.Fatalf("block %d differs", i)
		}
	}
	if _, ok := r.Take("t1"); ok {
		t.Fatal("a transfer taken twice")
	}
	// Transfers the receiver must refuse.
	other := func(id string, edit func(*Header)) Header {
		h := testHeader(id, 3, size)
		edit(&h)
		return h
	}
	for _, c := range []struct {
		h    Header
		want string
	}{
		{other("t2", func(h *Header) { h.Model = "other" }), "model"},
		{other("t3", func(h *Header) { h.BlockSize = 32 }), "blocks of 32 tokens"},
		{other("t4", func(h *Header) { h.BlockBytes = size + 4 }), "bytes"},
		{other("t6", func(h *Header) { h.NumLayers = 2 }), "2 layers, this instance's are 16, 1000 and 4"},
		// An fp8 cache's blocks are the size of an int8 cache's, but not its bytes.
		{other("t5", func(h *Header) { h.KVCacheDType = "fp8_e4m3" }), "a kv cache of fp8_e4m3 elements, this instance's holds int8"},
		// A tensor-parallel model's blocks keep each rank's KV heads apart: as many bytes,
		// another meaning.
		{other("t7", func(h *Header) { h.KVLayout = "tp2-pp1" }), "blocks laid out for a model split tp2-pp1, this instance's are for not by tensor"},
	} {
		bl := blocks
		if c.h.BlockBytes != size {
			bl, _ = testBlocks(3, c.h.BlockBytes)
		}
		err := s.Send(context.Background(), r.Addr().String(), c.h, hashes, layerMajor(bl, c.h.NumLayers))
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.h, err, c.want)
		}
	}
	st := r.Stats()
	if st.Received != 1 || st.Taken != 1 || st.HeldBytes != 0 || st.Bytes != 3*size || st.Failed != 6 {
		t.Errorf("stats %+v", st)
	}
}

// TestLayersInAnyOrder: a block is assembled from its layers whatever order they come in
// (block after block, or interleaved), each put at its layer's place.
func TestLayersInAnyOrder(t *testing.T) {
	const size = 64
	r := newTestReceiver(t, size, ReceiverConfig{})
	blocks, hashes := testBlocks(2, size)
	src := &memSource{blocks: blocks, layers: testLayers, parts: [][2]int{{1, 3}, {0, 0}, {1, 0}, {0, 2}, {0, 1}, {1, 1}, {0, 3}, {1, 2}}}
	if err := (&Sender{Timeout: time.Second}).Send(context.Background(), r.Addr().String(), testHeader("o", 2, size), hashes, src); err != nil {
		t.Fatal(err)
	}
	got, ok := r.Take("o")
	if !ok || !bytes.Equal(got.Data, bytes.Join(blocks, nil)) {
		t.Fatal("blocks sent in another order are not assembled as sent")
	}
}

// TestReceiverBounds checks the held-bytes limit and the TTL.
func TestReceiverBounds(t *testing.T) {
	const size = 100
	r := newTestReceiver(t, size, ReceiverConfig{MaxHeldBytes: 5 * size, TTL: 100 * time.Millisecond})
	blocks, hashes := testBlocks(3, size)
	s := &Sender{Timeout: time.Second}
	h := testHeader("a", 3, size)
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, newMemSource(blocks)); err != nil {
		t.Fatal(err)
	}
	h.ID = "b"
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, newMemSource(blocks)); !errors.Is(err, ErrRefused) {
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
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, newMemSource(blocks)); err != nil {
		t.Fatal(err)
	}
}

// sendRaw writes wire to the receiver and returns its acknowledgement.
func sendRaw(t *testing.T, r *Receiver, wire []byte) Ack {
	t.Helper()
	conn, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(wire); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ack Ack
	if err := readJSONFrame(conn, FrameAck, &ack); err != nil {
		t.Fatal(err)
	}
	return ack
}

// TestBadLayerFramesRefused: a transfer whose frames are corrupt, lack a layer, repeat
// one, name a layer past the block's or a block past the transfer's, or give a block's
// layers under different hashes is refused with the reason and not held.
func TestBadLayerFramesRefused(t *testing.T) {
	const size = 512
	lb := size / testLayers
	r := newTestReceiver(t, size, ReceiverConfig{})
	blocks, hashes := testBlocks(2, size)
	h := testHeader("c", 2, size)
	all := newMemSource(blocks).parts
	last := len(all) - 1 // block 1's layer 3, after every other part
	at := func(w []byte, k int) []byte { return w[frameAt(w, k, lb)+frameHead:] }
	for _, c := range []struct {
		name  string
		parts [][2]int
		edit  func(wire []byte)
		want  string
	}{
		{name: "a bit flipped in one layer", parts: all, want: "checksum",
			edit: func(w []byte) { at(w, last)[layerPrefix+lb/2] ^= 1 }},
		{name: "a missing layer", parts: all[:last], want: "block 1 lacks layer 3"},
		{name: "a layer twice", parts: append(slices.Clone(all[:last]), [2]int{0, 2}), want: "block 0: layer 2 twice"},
		{name: "a layer past the block's", parts: all, want: "layer 4 of blocks of 4 layers",
			edit: func(w []byte) { binary.BigEndian.PutUint32(at(w, last)[4:], testLayers) }},
		{name: "a block past the transfer's", parts: all, want: "block 2 of a transfer of 2",
			edit: func(w []byte) { binary.BigEndian.PutUint32(at(w, last), 2) }},
		{name: "a layer of another block", parts: all, want: "names another block",
			edit: func(w []byte) { at(w, last)[8] ^= 0xFF }},
		{name: "version 1 of the framing", parts: all, want: "version 1",
			edit: func(w []byte) { copy(w, "KVX1") }},
	} {
		var wire bytes.Buffer
		if err := writeTransfer(&wire, h, hashes, c.parts, blocks); err != nil {
			t.Fatal(err)
		}
		if c.edit != nil {
			c.edit(wire.Bytes())
		}
		ack := sendRaw(t, r, wire.Bytes())
		if ack.OK || !strings.Contains(ack.Error, c.want) {
			t.Errorf("%s: ack %+v, want a refusal naming %q", c.name, ack, c.want)
		}
		if _, ok := r.Take("c"); ok {
			t.Fatalf("%s: the transfer is held", c.name)
		}
	}
	if st := r.Stats(); st.HeldBytes != 0 || st.Failed != 7 {
		t.Fatalf("stats %+v after the refusals", st)
	}
	// The same frames unedited are taken.
	var wire bytes.Buffer
	if err := writeTransfer(&wire, h, hashes, all, blocks); err != nil {
		t.Fatal(err)
	}
	if ack := sendRaw(t, r, wire.Bytes()); !ack.OK {
		t.Fatalf("the unedited transfer: ack %+v", ack)
	}
}

// frameAt returns the offset of layer frame k of a transfer's wire bytes written by
// writeTransfer (frames of layer bytes lb).
func frameAt(wire []byte, k, lb int) int {
	hlen := int(binary.BigEndian.Uint32(wire[len(Magic)+1:]))
	return len(Magic) + frameHead + hlen + k*(frameHead+layerPrefix+lb)
}

// TestStalledSender checks that a sender that stops mid-transfer loses it after the
// receiver's timeout, and that a receiver that never acknowledges fails the sender after
// its own.
func TestStalledSender(t *testing.T) {
	const size = 256
	r := newTestReceiver(t, size, ReceiverConfig{Timeout: 100 * time.Millisecond})
	blocks, hashes := testBlocks(2, size)
	h := testHeader("s", 2, size)
	var wire bytes.Buffer
	if err := writeTransfer(&wire, h, hashes, newMemSource(blocks).parts, blocks); err != nil {
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
	err = (&Sender{Timeout: 100 * time.Millisecond}).Send(context.Background(), ln.Addr().String(), h, hashes, newMemSource(blocks))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("silent receiver: %v after %v, want a timeout", err, time.Since(start))
	}
}

// TestSourceEndsEarly: a source that ends before every layer was sent fails the transfer
// on the sender's side, and the receiver holds nothing.
func TestSourceEndsEarly(t *testing.T) {
	const size = 64
	r := newTestReceiver(t, size, ReceiverConfig{})
	blocks, hashes := testBlocks(2, size)
	src := newMemSource(blocks)
	src.parts = src.parts[:5]
	err := (&Sender{Timeout: time.Second}).Send(context.Background(), r.Addr().String(), testHeader("e", 2, size), hashes, src)
	if err == nil || !strings.Contains(err.Error(), "ended after 5 of 4 layers of 2 blocks") {
		t.Fatalf("a source that ends early: %v", err)
	}
	if _, ok := r.Take("e"); ok {
		t.Fatal("an incomplete transfer is held")
	}
}

// writeTransfer writes a whole transfer as a sender does, its parts in the order given,
// without the acknowledgement.
func writeTransfer(w io.Writer, h Header, hashes []kvcache.BlockHash, parts [][2]int, blocks [][]byte) error {
	if _, err := io.WriteString(w, Magic); err != nil {
		return err
	}
	if err := writeJSONFrame(w, FrameHeader, h); err != nil {
		return err
	}
	lb := h.LayerBytes()
	for _, p := range parts {
		if err := writeLayer(w, p[0], p[1], hashes[p[0]], blocks[p[0]][p[1]*lb:][:lb]); err != nil {
			return err
		}
	}
	return writeFrame(w, FrameEnd)
}

// readTransfer parses a transfer from r as the receiver does, with blocks of at most
// maxBlock bytes, returning its header, its parts in order and the assembled blocks.
func readTransfer(r io.Reader, maxBlock int) (Header, []Part, Received, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return h, nil, Received{}, err
	}
	if h.BlockBytes > maxBlock || h.NumBlocks > 64 {
		return h, nil, Received{}, errors.New("too big for the test")
	}
	a := newAssembly(h)
	var parts []Part
	for {
		p, end, err := ReadPart(r, h, make([]byte, h.LayerBytes()))
		if err != nil {
			return h, nil, Received{}, err
		}
		if end {
			break
		}
		if err := a.add(p); err != nil {
			return h, nil, Received{}, err
		}
		parts = append(parts, p)
	}
	got, err := a.done()
	return h, parts, got, err
}

// FuzzReadTransfer feeds the frame parser and the assembly arbitrary bytes: they must never
// panic, and what they accept must be a well-formed transfer with every layer of every
// block once, each passing its checksum, which writes back to the same blocks.
func FuzzReadTransfer(f *testing.F) {
	blocks, hashes := testBlocks(2, 8)
	h := testHeader("x", 2, 8)
	var wire bytes.Buffer
	writeTransfer(&wire, h, hashes, newMemSource(blocks).parts, blocks)
	f.Add(wire.Bytes())
	wire.Reset()
	writeTransfer(&wire, h, hashes, newMemSource(blocks).parts[1:], blocks)
	f.Add(wire.Bytes())
	f.Add([]byte(Magic + "H\x00\x00\x00\x02{}"))
	f.Add([]byte("KVX2L\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, parts, got, err := readTransfer(bytes.NewReader(data), 1<<12)
		if err != nil {
			return
		}
		if err := h.check(); err != nil {
			t.Fatalf("accepted header %+v: %v", h, err)
		}
		if len(parts) != h.NumBlocks*h.NumLayers {
			t.Fatalf("accepted %d parts of %d blocks of %d layers", len(parts), h.NumBlocks, h.NumLayers)
		}
		order := make([][2]int, len(parts))
		for i, p := range parts {
			if Checksum(p.Data) != p.CRC || got.Hashes[p.Block] != p.Hash {
				t.Fatalf("accepted part %d (block %d layer %d): bad checksum or hash", i, p.Block, p.Layer)
			}
			order[i] = [2]int{p.Block, p.Layer}
		}
		bl := make([][]byte, h.NumBlocks)
		for i := range bl {
			bl[i] = got.Data[i*h.BlockBytes:][:h.BlockBytes]
		}
		var again bytes.Buffer
		if err := writeTransfer(&again, h, got.Hashes, order, bl); err != nil {
			t.Fatal(err)
		}
		if _, _, back, err := readTransfer(bytes.NewReader(again.Bytes()), 1<<12); err != nil || !bytes.Equal(back.Data, got.Data) {
			t.Fatalf("a transfer written back does not read back the same: %v", err)
		}
	})
}

// slowSource waits before each block's first layer after the first block's, as a prefill
// computing the next chunk.
type slowSource struct {
	*memSource
	wait time.Duration
}

func (s slowSource) Next(ctx context.Context, dst []byte) (int, int, error) {
	if s.next > 0 && s.next%testLayers == 0 {
		select {
		case <-time.After(s.wait):
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	return s.memSource.Next(ctx, dst)
}

// blockMajor serves blocks block after block, each layer after layer.
func blockMajor(blocks [][]byte) *memSource {
	m := &memSource{blocks: blocks, layers: testLayers}
	for b := range blocks {
		for l := range testLayers {
			m.parts = append(m.parts, [2]int{b, l})
		}
	}
	return m
}

// TestKeepalive checks that a sender whose source waits longer than the timeouts keeps the
// transfer alive with keepalive frames, and that the receiver's bound on a whole transfer
// still ends one kept alive too long.
func TestKeepalive(t *testing.T) {
	const size = 64
	blocks, hashes := testBlocks(3, size)
	s := &Sender{Timeout: 100 * time.Millisecond}
	h := testHeader("k", 3, size)
	r := newTestReceiver(t, size, ReceiverConfig{Timeout: 100 * time.Millisecond})
	if err := s.Send(context.Background(), r.Addr().String(), h, hashes, slowSource{blockMajor(blocks), 350 * time.Millisecond}); err != nil {
		t.Fatalf("a slow source kept alive: %v", err)
	}
	if got, ok := r.Take("k"); !ok || !bytes.Equal(got.Data[2*size:], blocks[2]) {
		t.Fatal("the transfer kept alive is not held whole")
	}
	short := newTestReceiver(t, size, ReceiverConfig{Timeout: 100 * time.Millisecond, MaxDuration: 300 * time.Millisecond})
	if err := s.Send(context.Background(), short.Addr().String(), h, hashes, slowSource{blockMajor(blocks), 400 * time.Millisecond}); err == nil {
		t.Fatal("a transfer past the receiver's MaxDuration succeeded")
	}
}
