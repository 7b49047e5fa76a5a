package gguf

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestParseHostile feeds broken and malicious headers to Parse: each must fail at once with
// an error naming the file and the field, without panicking or allocating what the file
// claims.
func TestParseHostile(t *testing.T) {
	huge := uint64(1) << 62
	nested := newRaw(3, 0, 1).str("deep").u32(uint32(ArrayType))
	for range 1000 {
		nested.u32(uint32(ArrayType)).u64(1)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "magic: truncated"},
		{"wrong magic", []byte("GGML\x03\x00\x00\x00"), `magic: "GGML" is not "GGUF"`},
		{"version 1", newRaw(1, 0, 0).b, "version 1 is not supported"},
		{"version 0", newRaw(0, 0, 0).b, "unsupported GGUF version 0"},
		{"version 4", newRaw(4, 0, 0).b, "unsupported GGUF version 4"},
		{"big-endian", []byte("GGUF\x00\x00\x00\x03"), "big-endian"},
		{"no counts", []byte("GGUF\x03\x00\x00\x00\x01"), "tensor count: truncated"},
		{"2^40 kvs", newRaw(3, 0, 1<<40).b, "metadata count 1099511627776"},
		{"2^40 tensors", newRaw(3, 1<<40, 0).b, "tensor count 1099511627776"},
		{"2^62 key", newRaw(3, 0, 1).u64(huge).padTo(1, 16).b, "kv 0: key: length 4611686018427387904"},
		{"truncated key", newRaw(3, 0, 1).u64(10).bytes(1, 2, 3, 4, 5, 6).b, "kv 0: key: length 10"},
		{"2^62 string", newRaw(3, 0, 1).str("s").u32(uint32(StringType)).u64(huge).b, `kv 0 "s": string: length 4611686018427387904`},
		{"bad value type", newRaw(3, 0, 1).str("s").u32(13).b, `kv 0 "s": value type: invalid value type 13`},
		{"truncated u32", newRaw(3, 0, 1).str("s").u32(uint32(Uint32Type)).bytes(1, 2).b, `kv 0 "s": UINT32: truncated`},
		{"2^40 array", newRaw(3, 0, 1).str("a").u32(uint32(ArrayType)).u32(uint32(Uint64Type)).u64(1 << 40).b,
			`kv 0 "a": array count 1099511627776`},
		{"2^40 strings", newRaw(3, 0, 1).str("a").u32(uint32(ArrayType)).u32(uint32(StringType)).u64(1 << 40).b,
			`kv 0 "a": array count 1099511627776`},
		{"2^40 arrays", newRaw(3, 0, 1).str("a").u32(uint32(ArrayType)).u32(uint32(ArrayType)).u64(1 << 40).b,
			`kv 0 "a": array count 1099511627776`},
		{"bad element type", newRaw(3, 0, 1).str("a").u32(uint32(ArrayType)).u32(77).u64(0).b, "invalid value type 77"},
		{"deep nesting", nested.b, `kv 0 "deep": array element 0: array element 0:`},
		{"string in array", newRaw(3, 0, 1).str("a").u32(uint32(ArrayType)).u32(uint32(StringType)).u64(2).str("x").u64(huge).b,
			`kv 0 "a": array element 1: string: length`},
		{"duplicate key", newRaw(3, 0, 2).kv("a", Uint8(1)).kv("a", Uint8(2)).b, `kv 1 "a": duplicate key (also kv 0)`},
		{"alignment 0", newRaw(3, 0, 1).kv(KeyAlignment, Uint32(0)).b, "alignment 0 is not a power of two"},
		{"alignment 48", newRaw(3, 0, 1).kv(KeyAlignment, Uint32(48)).b, "alignment 48 is not a power of two"},
		{"alignment type", newRaw(3, 0, 1).kv(KeyAlignment, String("32")).b, "alignment has type STRING"},
		{"truncated tensor", newRaw(3, 1, 0).str("w").u32(2).u64(4).padTo(1, 16).b, `tensor 0 "w": `},
		{"five dims", newRaw(3, 1, 0).tensor("w", quant.F32, 0, 1, 1, 1, 1, 1).b, `tensor 0 "w": dimension count 5`},
		{"dims overflow", newRaw(3, 1, 0).tensor("w", quant.F32, 0, 1<<32, 1<<31, 2).padTo(32, 0).b,
			`tensor 0 "w": dimensions [4294967296 2147483648 2]: element count overflows`},
		{"dimension past int64", newRaw(3, 1, 0).tensor("w", quant.F32, 0, 0, 1<<63).padTo(32, 0).b,
			`tensor 0 "w": dimension 1 is 9223372036854775808, more than int64 holds`},
		{"bytes overflow", newRaw(3, 1, 0).tensor("w", quant.F64, 0, 1<<62).padTo(32, 0).b, "byte size overflows"},
		{"offset past end", newRaw(3, 1, 0).tensor("blk.0.attn_q.weight", quant.F32, 4096, 4).padTo(32, 16).b,
			`tensor 0 "blk.0.attn_q.weight": data offset 4096 past end of file`},
		{"huge offset", newRaw(3, 1, 0).tensor("w", quant.F32, 1<<63, 4).padTo(32, 16).b, "data offset 9223372036854775808 past end"},
		{"data past end", newRaw(3, 1, 0).tensor("w", quant.F32, 0, 8).padTo(32, 16).b, `tensor 0 "w": data at offset 0 of 32 bytes runs past end`},
		{"misaligned", newRaw(3, 1, 0).tensor("w", quant.F32, 4, 4).padTo(32, 64).b, "data offset 4 is not a multiple of the alignment 32"},
		{"overlap", newRaw(3, 2, 0).tensor("a", quant.F32, 32, 16).tensor("b", quant.F32, 0, 16).padTo(32, 128).b,
			`tensor 0 "a": data at offset 32 overlaps tensor 1 "b" (offset 0, 64 bytes)`},
		{"partial block", newRaw(3, 1, 0).tensor("q", quant.Q8_0, 0, 31).padTo(32, 64).b, "not a multiple of the block size 32"},
		{"duplicate tensor", newRaw(3, 2, 0).tensor("w", quant.F32, 0, 4).tensor("w", quant.F32, 32, 4).padTo(32, 64).b,
			`tensor 1 "w": duplicate name (also tensor 0)`},
		{"no data section", newRaw(3, 1, 0).tensor("w", quant.F32, 0, 0).b, "data section starts at offset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := Parse("model.gguf", c.data)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("allocated %d bytes for a %d-byte input", alloc, len(c.data))
			}
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "gguf model.gguf: ") || !strings.Contains(msg, c.want) {
				t.Errorf("error %q, want one naming the file and containing %q", msg, c.want)
			}
			if elapsed > time.Second {
				t.Errorf("took %v", elapsed)
			}
		})
	}
}

// TestUnknownTensorType: a tensor of a type this build does not know is listed, and only
// taking its data fails.
func TestUnknownTensorType(t *testing.T) {
	data := newRaw(3, 2, 0).tensor("odd", 200, 0, 7, 3).tensor("w", quant.F32, 32, 4).padTo(32, 48).b
	f, err := Parse("odd.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := f.Tensor("odd")
	if !ok || ti.Type != 200 || !equalDims(ti.Dims, []uint64{7, 3}) {
		t.Fatalf("odd tensor: %+v %v", ti, ok)
	}
	if _, err := f.TensorData(ti); err == nil || !strings.Contains(err.Error(), `gguf odd.gguf: tensor "odd": unknown tensor type 200`) {
		t.Errorf("TensorData: %v", err)
	}
	w, _ := f.Tensor("w")
	if b, err := f.TensorData(w); err != nil || len(b) != 16 {
		t.Errorf("TensorData(w): %d bytes, %v", len(b), err)
	}
	// A TensorInfo that does not come from the file is still bounds-checked.
	if _, err := f.TensorData(&TensorInfo{Name: "x", Type: quant.F32, Dims: []uint64{4}, Offset: 1 << 63}); err == nil {
		t.Error("TensorData accepted an offset past the end")
	}
}

// TestParseTruncations: every prefix of a valid file fails cleanly (or, for the prefixes
// that end the file after a complete header without tensors, parses).
func TestParseTruncations(t *testing.T) {
	data := newRaw(2, 1, 3).kv("general.architecture", String("llama")).
		kv("a", Array(ArrayType, Strings([]string{"x", "yz"}), Float32s([]float32{1, 2}))).
		kv("b", Bool(true)).tensor("w", quant.Q8_0, 0, 32, 2).padTo(32, 68).b
	f, err := Parse("full.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.KV) != 3 || len(f.Tensors) != 1 {
		t.Fatalf("parsed %d kvs, %d tensors", len(f.KV), len(f.Tensors))
	}
	for n := range len(data) {
		if _, err := Parse("cut.gguf", data[:n]); err == nil {
			t.Fatalf("prefix of %d bytes parsed", n)
		} else if !strings.HasPrefix(err.Error(), "gguf cut.gguf: ") {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.gguf"), "no such file"},
		{dir, "not a regular file"},
		{empty, "magic: truncated"},
	} {
		_, err := Open(c.path)
		if err == nil || !strings.HasPrefix(err.Error(), "gguf "+c.path+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v, want %q", c.path, err, c.want)
		}
	}
}

// TestNoTensorsNoPadding: a file of metadata only may end right after its header, as the
// llama.cpp vocabulary files do.
func TestNoTensorsNoPadding(t *testing.T) {
	data := newRaw(3, 0, 1).kv("general.architecture", String("llama")).b
	f, err := Parse("vocab.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Architecture() != "llama" || f.DataOffset < int64(len(data)) || f.DataOffset%32 != 0 {
		t.Fatalf("architecture %q, data offset %d", f.Architecture(), f.DataOffset)
	}
}
