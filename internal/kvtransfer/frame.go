// Package kvtransfer moves a request's KV blocks from a prefill instance to a decode
// instance over TCP (prefill/decode disaggregation): a sender that streams blocks block by
// block, each with its chained hash and a CRC-32C of its bytes, and a receiver that checks
// every frame, keeps a complete transfer in host memory under its id until the decode
// request that needs it takes it, and acknowledges it. The sender releases its blocks only
// after the acknowledgement; a transfer that stalls, breaks or fails a checksum is dropped
// whole, and the decode instance computes the prompt itself. docs/KV_TRANSFER.md is the
// protocol.
package kvtransfer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// Magic opens every transfer connection (version 1 of the framing).
const Magic = "KVX1"

// Frame types.
const (
	// FrameHeader carries a Header as JSON; the first frame after Magic.
	FrameHeader byte = 'H'
	// FrameBlock carries one block: index, chained hash, CRC-32C, bytes.
	FrameBlock byte = 'B'
	// FrameKeepalive (no payload) may come before any block frame: the sender is still
	// waiting for the block (its prefill computes it) and the connection is alive.
	FrameKeepalive byte = 'K'
	// FrameEnd closes the blocks (no payload).
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
	// MaxBlocks bounds the blocks of one transfer.
	MaxBlocks = 1 << 20
	// hashLen is the bytes of a chained block hash.
	hashLen = len(kvcache.BlockHash{})
	// blockPrefix is a block frame's bytes before the block's own: index, hash, CRC.
	blockPrefix = 4 + hashLen + 4
	// frameHead is a frame's type and payload length.
	frameHead = 1 + 4
)

// castagnoli is the CRC-32C table (the checksum of iSCSI and ext4, with hardware support on
// amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of a block's bytes, as a block frame carries it.
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
	// NumBlocks is the number of block frames that follow.
	NumBlocks int `json:"num_blocks"`
}

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

// Block is one block frame.
type Block struct {
	Index int
	Hash  kvcache.BlockHash
	CRC   uint32
	Data  []byte
}

// ErrChecksum is a block whose bytes do not match their CRC-32C.
var ErrChecksum = errors.New("kvtransfer: block checksum mismatch")

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

// writeBlock writes block index of the transfer: its hash, the CRC-32C of data, and data.
func writeBlock(w io.Writer, index int, hash kvcache.BlockHash, data []byte) error {
	var pre [blockPrefix]byte
	binary.BigEndian.PutUint32(pre[0:], uint32(index))
	copy(pre[4:], hash[:])
	binary.BigEndian.PutUint32(pre[4+hashLen:], Checksum(data))
	return writeFrame(w, FrameBlock, pre[:], data)
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
	if string(magic[:]) != Magic {
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

// ReadBlock reads the block frame of index want of a transfer with blocks of blockBytes
// into dst (len blockBytes), checking its index and its checksum; keepalive frames before
// it are skipped.
func ReadBlock(r io.Reader, want, blockBytes int, dst []byte) (Block, error) {
	typ, n, err := readFrameHead(r, blockPrefix+blockBytes)
	for err == nil && typ == FrameKeepalive && n == 0 {
		typ, n, err = readFrameHead(r, blockPrefix+blockBytes)
	}
	if err != nil {
		return Block{}, err
	}
	if typ != FrameBlock {
		return Block{}, fmt.Errorf("kvtransfer: frame %q where block %d was expected", typ, want)
	}
	if n != blockPrefix+blockBytes {
		return Block{}, fmt.Errorf("kvtransfer: block frame of %d bytes (want %d)", n, blockPrefix+blockBytes)
	}
	var pre [blockPrefix]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Block{}, err
	}
	if _, err := io.ReadFull(r, dst[:blockBytes]); err != nil {
		return Block{}, err
	}
	b := Block{Index: int(binary.BigEndian.Uint32(pre[0:])), CRC: binary.BigEndian.Uint32(pre[4+hashLen:]), Data: dst[:blockBytes]}
	copy(b.Hash[:], pre[4:4+hashLen])
	if b.Index != want {
		return Block{}, fmt.Errorf("kvtransfer: block %d where %d was expected", b.Index, want)
	}
	if Checksum(b.Data) != b.CRC {
		return Block{}, fmt.Errorf("%w: block %d", ErrChecksum, b.Index)
	}
	return b, nil
}

// ReadEnd reads the end frame.
func ReadEnd(r io.Reader) error {
	typ, n, err := readFrameHead(r, 0)
	if err != nil {
		return err
	}
	if typ != FrameEnd || n != 0 {
		return fmt.Errorf("kvtransfer: frame %q where the end was expected", typ)
	}
	return nil
}
