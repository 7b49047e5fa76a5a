package gguf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// WriterTensor is one tensor to write: its name, type and dimensions, and its data either
// in memory (Data) or streamed (WriteData) for models too large to hold at once.
type WriterTensor struct {
	// Name must be 1 to MaxTensorName bytes and unique in the file.
	Name string
	// Type is the element type; it must be one this build knows.
	Type quant.Type
	// Dims are 1 to MaxDims dimensions in file order, innermost first (the reverse of the
	// PyTorch shape). Dims[0] must be a whole number of Type's blocks.
	Dims []uint64
	// Data holds exactly the tensor's bytes. It is used when WriteData is nil.
	Data []byte
	// WriteData, when set, is called once while the file is written and must write exactly
	// the tensor's bytes to w; writing more or fewer is an error.
	WriteData func(w io.Writer) error
}

// Writer writes one GGUF file: add metadata and tensors, then call Finish, which writes the
// header and streams the tensor data in the order the tensors were added. Each tensor starts
// at a multiple of the alignment (general.alignment, 32 by default) and is followed by zero
// padding to the next multiple, as llama.cpp lays files out.
//
// The caller adds the standard keys (general.architecture and the rest) itself. Arrays of
// arrays are written as the GGUF specification defines them, though llama.cpp's own loader
// refuses them.
type Writer struct {
	// Name names the output in errors (WriteFile sets it to the path).
	Name string

	w          io.Writer
	version    uint32
	alignment  int
	kvs        []KV
	kvIndex    map[string]int
	tensors    []WriterTensor
	sizes      []uint64
	tIndex     map[string]int
	onProgress func(done, total int64)
	finished   bool

	done, total, lastReport int64
}

// NewWriter returns a Writer that writes a GGUF file of the given version (2 or 3) to w.
func NewWriter(w io.Writer, version uint32) (*Writer, error) {
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("gguf writer: cannot write GGUF version %d (only 2 and 3)", version)
	}
	return &Writer{
		Name:      "writer",
		w:         w,
		version:   version,
		alignment: DefaultAlignment,
		kvIndex:   map[string]int{},
		tIndex:    map[string]int{},
	}, nil
}

func (w *Writer) errorf(format string, args ...any) error {
	return fmt.Errorf("gguf %s: %w", w.Name, fmt.Errorf(format, args...))
}

// AddKV adds a metadata key. Keys must be unique and non-empty; a general.alignment key must
// be a UINT32 power of two and sets the alignment.
func (w *Writer) AddKV(key string, v Value) error {
	if w.finished {
		return w.errorf("kv %q: added after Finish", key)
	}
	if key == "" || len(key) > math.MaxUint16 {
		return w.errorf("kv %q: key must be 1 to %d bytes", key, math.MaxUint16)
	}
	if _, dup := w.kvIndex[key]; dup {
		return w.errorf("kv %q: duplicate key", key)
	}
	if err := checkValue(v, 0); err != nil {
		return w.errorf("kv %q: %w", key, err)
	}
	if key == KeyAlignment {
		a, err := checkAlignment(v)
		if err != nil {
			return w.errorf("kv %q: %w", key, err)
		}
		w.alignment = a
	}
	w.kvIndex[key] = len(w.kvs)
	w.kvs = append(w.kvs, KV{Key: key, Value: v})
	return nil
}

// SetAlignment sets the data alignment, a power of two, by setting general.alignment
// (replacing its value if it was already added).
func (w *Writer) SetAlignment(n int) error {
	if n <= 0 || n > math.MaxUint32 || n&(n-1) != 0 {
		return w.errorf("alignment %d is not a power of two", n)
	}
	if i, ok := w.kvIndex[KeyAlignment]; ok {
		w.kvs[i].Value = Uint32(uint32(n))
		w.alignment = n
		return nil
	}
	return w.AddKV(KeyAlignment, Uint32(uint32(n)))
}

// Alignment returns the data alignment the file will be written with.
func (w *Writer) Alignment() int { return w.alignment }

// AddTensor adds a tensor; its data is written by Finish, in the order tensors were added.
func (w *Writer) AddTensor(t WriterTensor) error {
	if w.finished {
		return w.errorf("tensor %q: added after Finish", t.Name)
	}
	if t.Name == "" || len(t.Name) > MaxTensorName {
		return w.errorf("tensor %q: name must be 1 to %d bytes", t.Name, MaxTensorName)
	}
	if _, dup := w.tIndex[t.Name]; dup {
		return w.errorf("tensor %q: duplicate name", t.Name)
	}
	if len(t.Dims) == 0 || len(t.Dims) > MaxDims {
		return w.errorf("tensor %q: %d dimensions (want 1 to %d)", t.Name, len(t.Dims), MaxDims)
	}
	size, err := tensorBytes(t.Type, t.Dims)
	if err != nil {
		return w.errorf("tensor %q: %w", t.Name, err)
	}
	if t.WriteData == nil && uint64(len(t.Data)) != size {
		return w.errorf("tensor %q: %s %v needs %d bytes of data, have %d", t.Name, t.Type, t.Dims, size, len(t.Data))
	}
	if w.total > math.MaxInt64-int64(size) {
		return w.errorf("tensor %q: total data size overflows", t.Name)
	}
	t.Dims = append([]uint64(nil), t.Dims...)
	w.tIndex[t.Name] = len(w.tensors)
	w.tensors = append(w.tensors, t)
	w.sizes = append(w.sizes, size)
	w.total += int64(size)
	return nil
}

// OnProgress sets a function called while Finish writes tensor data, with the bytes of
// tensor data written so far and the total.
func (w *Writer) OnProgress(fn func(done, total int64)) { w.onProgress = fn }

// offsets returns each tensor's offset in the data section.
func (w *Writer) offsets() ([]uint64, error) {
	offs := make([]uint64, len(w.tensors))
	var off uint64
	for i, size := range w.sizes {
		offs[i] = off
		next, ok := alignUp(off+size, uint64(w.alignment))
		if !ok || off+size < off {
			return nil, w.errorf("tensor %q: data section size overflows", w.tensors[i].Name)
		}
		off = next
	}
	return offs, nil
}

// Header returns the encoded header (magic through the tensor infos, without the padding
// that follows), as Finish will write it.
func (w *Writer) Header() ([]byte, error) {
	offs, err := w.offsets()
	if err != nil {
		return nil, err
	}
	b := []byte(Magic)
	b = appendU32(b, w.version)
	b = appendU64(b, uint64(len(w.tensors)))
	b = appendU64(b, uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		b = appendString(b, kv.Key)
		b = appendU32(b, uint32(kv.Value.Type))
		b = appendValue(b, kv.Value)
	}
	for i, t := range w.tensors {
		b = appendString(b, t.Name)
		b = appendU32(b, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			b = appendU64(b, d)
		}
		b = appendU32(b, uint32(t.Type))
		b = appendU64(b, offs[i])
	}
	return b, nil
}

// Finish writes the file: the header, then each tensor's data, padded to the alignment. A
// file without tensors ends right after its header. Finish may be called once.
func (w *Writer) Finish() error {
	if w.finished {
		return w.errorf("Finish called twice")
	}
	w.finished = true
	header, err := w.Header()
	if err != nil {
		return err
	}
	if _, err := w.w.Write(header); err != nil {
		return w.errorf("write header: %w", err)
	}
	if len(w.tensors) == 0 {
		return nil
	}
	if err := w.pad(uint64(len(header))); err != nil {
		return w.errorf("write header padding: %w", err)
	}
	w.report(true)
	for i, t := range w.tensors {
		if err := w.writeTensor(t, w.sizes[i]); err != nil {
			return w.errorf("tensor %q: %w", t.Name, err)
		}
		if err := w.pad(w.sizes[i]); err != nil {
			return w.errorf("tensor %q: write padding: %w", t.Name, err)
		}
		w.report(true)
	}
	return nil
}

func (w *Writer) writeTensor(t WriterTensor, size uint64) error {
	if t.WriteData == nil {
		_, err := w.w.Write(t.Data)
		w.done += int64(len(t.Data))
		return err
	}
	sink := &tensorSink{w: w, left: size}
	if err := t.WriteData(sink); err != nil {
		return err
	}
	if sink.left != 0 {
		return fmt.Errorf("data source wrote %d bytes, want %d", size-sink.left, size)
	}
	return nil
}

// pad writes the zeros that bring n bytes up to a multiple of the alignment.
func (w *Writer) pad(n uint64) error {
	end, _ := alignUp(n, uint64(w.alignment))
	var zeros [4096]byte
	for left := end - n; left > 0; {
		k := min(left, uint64(len(zeros)))
		if _, err := w.w.Write(zeros[:k]); err != nil {
			return err
		}
		left -= k
	}
	return nil
}

// report calls the progress function at the end of each tensor (force) and at least every
// progressStep bytes while a tensor streams.
func (w *Writer) report(force bool) {
	const progressStep = 16 << 20
	if w.onProgress == nil || (!force && w.done-w.lastReport < progressStep) {
		return
	}
	w.lastReport = w.done
	w.onProgress(w.done, w.total)
}

// tensorSink passes a streamed tensor's bytes to the output, refusing more than the tensor
// holds.
type tensorSink struct {
	w    *Writer
	left uint64
}

func (s *tensorSink) Write(p []byte) (int, error) {
	if uint64(len(p)) > s.left {
		return 0, fmt.Errorf("data source wrote more than the tensor's size (%d bytes over)", uint64(len(p))-s.left)
	}
	n, err := s.w.w.Write(p)
	s.left -= uint64(n)
	s.w.done += int64(n)
	s.w.report(false)
	return n, err
}

// WriteFile writes a GGUF version 3 file at path holding kvs and tensors, in the given
// order. It writes to a temporary file beside path and renames it into place, so path never
// holds a partial file. onProgress, if not nil, is told the bytes of tensor data written.
func WriteFile(path string, kvs []KV, tensors []WriterTensor, onProgress func(done, total int64)) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("gguf %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	buf := bufio.NewWriterSize(tmp, 1<<20)
	w, err := NewWriter(buf, 3)
	if err != nil {
		return err
	}
	w.Name = path
	w.OnProgress(onProgress)
	for _, kv := range kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	for _, t := range tensors {
		if err := w.AddTensor(t); err != nil {
			return err
		}
	}
	if err := w.Finish(); err != nil {
		return err
	}
	err = errors.Join(buf.Flush(), tmp.Chmod(0o644), tmp.Sync())
	if err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("gguf %s: %w", path, err)
	}
	return nil
}
