package llama2c

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// RopeTheta is the rotary base llama2.c models use; Write fills the legacy rotary tables
// with it when no tables are given.
const RopeTheta = 10000.0

// Write writes a checkpoint with configuration cfg to w. tensors must hold exactly the
// tensors NewLayout(cfg) lists (in any order), each with that shape and 4 bytes per element.
// rope is written as the legacy rotary tables when its size is right; when nil they are
// computed with RopeTheta as llama2.c's exporter did.
func Write(w io.Writer, cfg Config, tensors []Tensor, rope []byte) error {
	lay, err := NewLayout(cfg)
	if err != nil {
		return fmt.Errorf("llama2c: write: %w", err)
	}
	byName := make(map[string]*Tensor, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if _, dup := byName[t.Name]; dup {
			return fmt.Errorf("llama2c: write: tensor %q given twice", t.Name)
		}
		byName[t.Name] = t
	}
	if len(byName) != len(lay.Entries) {
		return fmt.Errorf("llama2c: write: configuration calls for %d tensors, got %d", len(lay.Entries), len(byName))
	}
	if rope == nil {
		rope = ropeTables(cfg)
	}
	if int64(len(rope)) != lay.RopeSize {
		return fmt.Errorf("llama2c: write: rotary tables need %d bytes, got %d", lay.RopeSize, len(rope))
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(cfg.AppendHeader(nil)); err != nil {
		return fmt.Errorf("llama2c: write: %w", err)
	}
	for _, e := range lay.Entries {
		if e.Name == "output.weight" { // the separate classifier follows the rotary tables
			if _, err := bw.Write(rope); err != nil {
				return fmt.Errorf("llama2c: write: %w", err)
			}
		}
		t, ok := byName[e.Name]
		if !ok {
			return fmt.Errorf("llama2c: write: tensor %q missing", e.Name)
		}
		if !slices.Equal(t.Shape, e.Shape) || int64(len(t.Data)) != e.Size {
			return fmt.Errorf("llama2c: write: tensor %q: shape %v with %d bytes, want %v with %d bytes",
				e.Name, t.Shape, len(t.Data), e.Shape, e.Size)
		}
		if _, err := bw.Write(t.Data); err != nil {
			return fmt.Errorf("llama2c: write: %w", err)
		}
	}
	if cfg.SharedClassifier {
		if _, err := bw.Write(rope); err != nil {
			return fmt.Errorf("llama2c: write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("llama2c: write: %w", err)
	}
	return nil
}

// WriteFile writes a checkpoint to the file at path (see Write).
func WriteFile(path string, cfg Config, tensors []Tensor, rope []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("llama2c: %w", err)
	}
	if err := Write(f, cfg, tensors, rope); err != nil {
		f.Close()
		return fmt.Errorf("%w (writing %s)", err, path)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("llama2c %s: %w", path, err)
	}
	return nil
}

// ropeTables computes the legacy freq_cis_real and freq_cis_imag tables: for position p and
// pair i, cos and sin of p / theta^(2i/head_size).
func ropeTables(cfg Config) []byte {
	half := cfg.HeadSize() / 2
	n := cfg.SeqLen * half
	out := make([]byte, 8*n)
	for p := range cfg.SeqLen {
		for i := range half {
			freq := 1 / math.Pow(RopeTheta, float64(2*i)/float64(cfg.HeadSize()))
			angle := float64(float32(p) * float32(freq))
			k := p*half + i
			binary.LittleEndian.PutUint32(out[4*k:], math.Float32bits(float32(math.Cos(angle))))
			binary.LittleEndian.PutUint32(out[4*(n+k):], math.Float32bits(float32(math.Sin(angle))))
		}
	}
	return out
}
