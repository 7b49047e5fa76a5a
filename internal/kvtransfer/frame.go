// Package kvtransfer moves a request's KV blocks from a prefill instance to a decode
// instance over TCP (prefill/decode disaggregation): a sender that streams each block
// layer by layer, one frame per (block, layer) with the block's chained hash and a
// CRC-32C of the layer's bytes, as the prefill computes the layers, and a receiver that
// checks every frame, assembles each block from its layers, keeps a complete transfer in
// host memory under its id until the decode request that needs it takes it, and
// acknowledges it. The sender releases its blocks only after the acknowledgement; a
// transfer that stalls, breaks, fails a checksum or lacks a layer is dropped whole, and the
// decode instance computes the prompt itself. docs/KV_TRANSFER.md is the protocol.
package kvtransfer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// Magic opens every transfer connection: version 2 of the framing, a frame per block and
// layer (version 1, "KVX1", sent whole blocks; a receiver refuses it).
const Magic = "KVX2"

// Frame types.
const (
	// FrameHeader carries a Header as JSON; the first frame after Magic.
	FrameHeader byte = 'H'
	// FrameLayer carries one layer of one block: block index, layer, the block's chained
	// hash, CRC-32C, the layer's bytes.
	FrameLayer byte = 'L'
	// FrameKeepalive (no payload) may come between any two frames before the end: the
	// sender is still waiting for the next layer (its prefill computes it) and the
	// connection is alive.
	FrameKeepalive byte = 'K'
	// FrameEnd closes the layers (no payload).
	FrameEnd byte = 'E'
	// FrameAck is the receiver's answer, an Ack as JSON; the last frame.
	FrameAck byte = 'A'
)

// Limits of the framing.
const (
	// MaxHeaderBytes bounds a header or ack payload.
	MaxHeaderBytes = 1 << 20
	// MaxBlockBytes bounds one block's bytes.
	MaxBlockBytes = 256 << 20
	// MaxBlocks bounds the blocks of one transfer, MaxLayers a block's layers.
	MaxBlocks = 1 << 20
	MaxLayers = 1 << 12
	// hashLen is the bytes of a chained block hash.
	hashLen = len(kvcache.BlockHash{})
	// layerPrefix is a layer frame's bytes before the layer's own: block index, layer,
	// hash, CRC.
	layerPrefix = 4 + 4 + hashLen + 4
	// frameHead is a frame's type and payload length.
	frameHead = 1 + 4
)

// castagnoli is the CRC-32C table (the checksum of iSCSI and ext4, with hardware support on
// amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of a layer's bytes, as a layer frame carries it.
func Checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli) }

// Header describes a transfer: what the blocks are and how big. The receiver refuses a
// transfer whose model, block size, block bytes or KV cache element type differ from its
// own.
type Header struct {
	// ID names the transfer; the decode request names it again to take the blocks.
	ID string `json:"transfer_id"`
	// Model is the sender's model name.
	Model string `json:"model"`
	// BlockSize is the tokens per block, BlockBytes the bytes of one block in the host
	// layout of the KV block I/O seam (backend.KVSpec).
	BlockSize  int `json:"block_size"`
	BlockBytes int `json:"block_bytes"`
	// KVCacheDType is the element type of the sender's cache ("F32", "F16", "BF16",
	// "int8", "fp8_e4m3", "fp8_e5m2"): caches of int8 and fp8 blocks have blocks of one
	// size, and a block's bytes mean something else in each.
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
	// KVLayout is how the sender's split lays a block's bytes out (kvasir.Engine.KVLayout):
	// empty for the unsplit model's layout (also a model split by pipeline only),
	// "tpT-ppP" for one split by tensor, whose blocks mean the same KV only to an engine
	// split the same way.
	KVLayout string `json:"kv_layout,omitempty"`
	// NumBlocks is the number of blocks, NumLayers the layers of each: NumBlocks x
	// NumLayers layer frames follow, LayerBytes each.
	NumBlocks int `json:"num_blocks"`
	NumLayers int `json:"num_layers"`
}

// LayerBytes is the bytes of one layer of a block: BlockBytes over NumLayers.
func (h *Header) LayerBytes() int { return h.BlockBytes / h.NumLayers }

// check validates a header read from the wire.
func (h *Header) check() error {
	switch {
	case h.ID == "" || len(h.ID) > 256:
		return fmt.Errorf("transfer id of %d bytes (want 1 to 256)", len(h.ID))
	case h.BlockSize <= 0 || h.BlockSize > 1<<16:
		return fmt.Errorf("block size %d", h.BlockSize)
	case h.BlockBytes <= 0 || h.BlockBytes > MaxBlockBytes:
		return fmt.Errorf("block bytes %d (want 1 to %d)", h.BlockBytes, MaxBlockBytes)
	case h.NumBlocks <= 0 || h.NumBlocks > MaxBlocks:
		return fmt.Errorf("%d blocks (want 1 to %d)", h.NumBlocks, MaxBlocks)
	case h.NumLayers <= 0 || h.NumLayers > MaxLayers || h.BlockBytes%h.NumLayers != 0:
		return fmt.Errorf("%d layers of a block of %d bytes (want 1 to %d, dividing it)", h.NumLayers, h.BlockBytes, MaxLayers)
	}
	return nil
}

// Ack is the receiver's answer to a transfer.
type Ack struct {
	// OK is set when every block arrived intact and is held for the decode request.
	OK bool `json:"ok"`
	// Error says why not.
	Error string `json:"error,omitempty"`
}

// Part is one layer frame: layer Layer of block Block, the block's chained hash, the CRC-32C
// of the layer's bytes, and the bytes.
type Part struct {
	Block, Layer int
	Hash         kvcache.BlockHash
	CRC          uint32
	Data         []byte
}

// ErrChecksum is a layer whose bytes do not match their CRC-32C.
var ErrChecksum = errors.New("kvtransfer: layer checksum mismatch")

// writeFrame writes one frame: its type, its payload's length (big-endian uint32) and the
// payload.
func writeFrame(w io.Writer, typ byte, payload ...[]byte) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	var head [frameHead]byte
	head[0] = typ
	binary.BigEndian.PutUint32(head[1:], uint32(n))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	for _, p := range payload {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// writeJSONFrame writes v as the JSON payload of a frame.
func writeJSONFrame(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFrame(w, typ, b)
}

// writeLayer writes the frame of layer of block index of a transfer: the block's hash, the
// CRC-32C of data, and data.
func writeLayer(w io.Writer, block, layer int, hash kvcache.BlockHash, data []byte) error {
	var pre [layerPrefix]byte
	binary.BigEndian.PutUint32(pre[0:], uint32(block))
	binary.BigEndian.PutUint32(pre[4:], uint32(layer))
	copy(pre[8:], hash[:])
	binary.BigEndian.PutUint32(pre[8+hashLen:], Checksum(data))
	return writeFrame(w, FrameLayer, pre[:], data)
}

// readFrameHead reads a frame's type and payload length, refusing a payload over max.
func readFrameHead(r io.Reader, max int) (byte, int, error) {
	var head [frameHead]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, 0, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if uint64(n) > uint64(max) {
		return 0, 0, fmt.Errorf("kvtransfer: frame %q of %d bytes (at most %d here)", head[0], n, max)
	}
	return head[0], int(n), nil
}

// readJSONFrame reads a frame that must be of type want with a JSON payload into v.
func readJSONFrame(r io.Reader, want byte, v any) error {
	typ, n, err := readFrameHead(r, MaxHeaderBytes)
	if err != nil {
		return err
	}
	if typ != want {
		return fmt.Errorf("kvtransfer: frame %q where %q was expected", typ, want)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	if err := json.Unmarshal(buf, v); err != nil {
		return fmt.Errorf("kvtransfer: frame %q: %w", typ, err)
	}
	return nil
}

// ReadHeader reads a transfer's opening: Magic, then a header frame, checked.
func ReadHeader(r io.Reader) (Header, error) {
	var magic [len(Magic)]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return Header{}, err
	}
	switch string(magic[:]) {
	case Magic:
	case "KVX1":
		return Header{}, fmt.Errorf("kvtransfer: a sender of version 1 of the framing (whole blocks); this receiver takes version 2 (%q, a frame per block and layer): run one kvasir version on every instance", Magic)
	default:
		return Header{}, fmt.Errorf("kvtransfer: bad magic %q (want %q)", magic[:], Magic)
	}
	var h Header
	if err := readJSONFrame(r, FrameHeader, &h); err != nil {
		return Header{}, err
	}
	if err := h.check(); err != nil {
		return Header{}, fmt.Errorf("kvtransfer: header: %w", err)
	}
	return h, nil
}

// ReadPart reads the next frame of a transfer of header h, skipping keepalive frames: a
// layer frame into dst (len h.LayerBytes()), checked (its length, a block and a layer in
// range, its checksum), or the end frame (end set).
func ReadPart(r io.Reader, h Header, dst []byte) (p Part, end bool, err error) {
	lb := h.LayerBytes()
	typ, n, err := readFrameHead(r, layerPrefix+lb)
	for err == nil && typ == FrameKeepalive && n == 0 {
		typ, n, err = readFrameHead(r, layerPrefix+lb)
	}
	switch {
	case err != nil:
		return Part{}, false, err
	case typ == FrameEnd && n == 0:
		return Part{}, true, nil
	case typ != FrameLayer:
		return Part{}, false, fmt.Errorf("kvtransfer: frame %q of %d bytes where a layer or the end was expected", typ, n)
	case n != layerPrefix+lb:
		return Part{}, false, fmt.Errorf("kvtransfer: layer frame of %d bytes (want %d)", n, layerPrefix+lb)
	}
	var pre [layerPrefix]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Part{}, false, err
	}
	if _, err := io.ReadFull(r, dst[:lb]); err != nil {
		return Part{}, false, err
	}
	p = Part{Block: int(binary.BigEndian.Uint32(pre[0:])), Layer: int(binary.BigEndian.Uint32(pre[4:])),
		CRC: binary.BigEndian.Uint32(pre[8+hashLen:]), Data: dst[:lb]}
	copy(p.Hash[:], pre[8:8+hashLen])
	switch {
	case p.Block >= h.NumBlocks:
		return Part{}, false, fmt.Errorf("kvtransfer: block %d of a transfer of %d", p.Block, h.NumBlocks)
	case p.Layer >= h.NumLayers:
		return Part{}, false, fmt.Errorf("kvtransfer: block %d: layer %d of blocks of %d layers", p.Block, p.Layer, h.NumLayers)
	case Checksum(p.Data) != p.CRC:
		return Part{}, false, fmt.Errorf("%w: block %d layer %d", ErrChecksum, p.Block, p.Layer)
	}
	return p, false, nil
}

// assembly puts a transfer's layer frames together into its blocks: each (block, layer)
// once, every layer of a block under the same hash.
type assembly struct {
	h       Header
	got     Received
	have    []bool // [block*NumLayers+layer]
	hashed  []bool // [block]: its hash is known
	missing int    // (block, layer) parts not received yet
}

// newAssembly starts assembling a transfer of header h (checked) into fresh memory.
func newAssembly(h Header) *assembly {
	return &assembly{h: h, got: Received{Hashes: make([]kvcache.BlockHash, h.NumBlocks), Data: make([]byte, h.NumBlocks*h.BlockBytes)},
		have: make([]bool, h.NumBlocks*h.NumLayers), hashed: make([]bool, h.NumBlocks), missing: h.NumBlocks * h.NumLayers}
}

// add puts a checked layer frame (ReadPart's) into its block, refusing a layer received
// already and a hash other than the block's other layers'.
func (a *assembly) add(p Part) error {
	k := p.Block*a.h.NumLayers + p.Layer
	switch {
	case a.have[k]:
		return fmt.Errorf("kvtransfer: block %d: layer %d twice", p.Block, p.Layer)
	case a.hashed[p.Block] && a.got.Hashes[p.Block] != p.Hash:
		return fmt.Errorf("kvtransfer: block %d: layer %d names another block (its hash differs from the block's other layers')", p.Block, p.Layer)
	}
	a.have[k], a.hashed[p.Block], a.got.Hashes[p.Block] = true, true, p.Hash
	lb := a.h.LayerBytes()
	copy(a.got.Data[p.Block*a.h.BlockBytes+p.Layer*lb:][:lb], p.Data)
	a.missing--
	return nil
}

// done returns the assembled transfer once every block has every layer, else an error
// naming the first part missing.
func (a *assembly) done() (Received, error) {
	if a.missing > 0 {
		k := slices.Index(a.have, false)
		return Received{}, fmt.Errorf("kvtransfer: incomplete transfer: block %d lacks layer %d (%d of %d layers of %d blocks missing)",
			k/a.h.NumLayers, k%a.h.NumLayers, a.missing, a.h.NumLayers, a.h.NumBlocks)
	}
	return a.got, nil
}
