package gguf

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/kvasir-llm/kvasir/internal/quant"

	"github.com/kvasir-llm/kvasir/internal/format/mmap"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// DefaultAlignment is the data alignment of a file without general.alignment.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that sets the data alignment (a UINT32 power of two).
const KeyAlignment = "general.alignment"

// KeyArchitecture is the metadata key naming the model architecture, such as "llama".
const KeyArchitecture = "general.architecture"

// KV is one metadata key and its value.
type KV struct {
	Key   string
	Value Value
}

// File is a parsed GGUF file. Its tensor data stays in the bytes it was parsed from (the
// read-only mapping, for a file from Open) until Close. A File is not changed after it is
// parsed, so any number of goroutines may read it at once (but not while one calls Close).
type File struct {
	// Path is the file's path as given to Open, or the name given to Parse.
	Path string
	// Version is the GGUF version, 2 or 3.
	Version uint32
	// Alignment is the data alignment: general.alignment, or 32 without it.
	Alignment int
	// KV lists the metadata in file order.
	KV []KV
	// Tensors lists the tensors in file order.
	Tensors []TensorInfo
	// DataOffset is where the data section starts, from the start of the file.
	DataOffset int64
	// Size is the file's size in bytes.
	Size int64

	data    []byte
	closed  bool
	unmap   func() error
	kvIndex map[string]int
	tIndex  map[string]int
}

// Open maps the file at path read-only and parses its header. The tensor data is not read
// (or copied): TensorData returns slices of the mapping, valid until Close.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf %s: not a regular file", path)
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("gguf %s: file of %d bytes is too large to map", path, st.Size())
	}
	data, unmap, err := mmap.File(fd, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	f, err := Parse(path, data)
	if err != nil {
		_ = unmap()
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// Close releases the mapping of a file from Open; afterwards TensorData fails and slices it
// returned must no longer be used. Close is safe to call more than once, and on a File from
// Parse (where it only drops the reference to the bytes).
func (f *File) Close() error {
	f.data = nil
	f.closed = true
	if f.unmap == nil {
		return nil
	}
	unmap := f.unmap
	f.unmap = nil
	if err := unmap(); err != nil {
		return fmt.Errorf("gguf %s: unmap: %w", f.Path, err)
	}
	return nil
}

// Parse parses a GGUF file held in data; name is used in errors. The File keeps data and
// TensorData returns slices of it.
func Parse(name string, data []byte) (*File, error) {
	f := &File{Path: name, data: data, Size: int64(len(data))}
	if err := f.parse(); err != nil {
		return nil, fmt.Errorf("gguf %s: %w", name, err)
	}
	return f, nil
}

// Minimum encoded sizes used to bound counts read from a file.
const (
	minKVBytes     = 8 + 4 + 1     // key length, value type, a one-byte value
	minTensorBytes = 8 + 4 + 4 + 8 // name length, dimension count, type, offset
)

func (f *File) parse() error {
	d := &decoder{data: f.data}
	magic, err := d.take(4, "magic")
	if err != nil {
		return err
	}
	if string(magic) != Magic {
		return fmt.Errorf("magic: %q is not %q (not a GGUF file)", magic, Magic)
	}
	if f.Version, err = d.u32("version"); err != nil {
		return err
	}
	switch v := f.Version; {
	case v == 2 || v == 3:
	case v == 1:
		return errors.New("version: GGUF version 1 is not supported (only 2 and 3)")
	case v != 0 && v&0xFFFF == 0:
		return fmt.Errorf("version: %#x looks byte-swapped: big-endian files are not supported", v)
	default:
		return fmt.Errorf("version: unsupported GGUF version %d (only 2 and 3)", v)
	}
	nTensors, err := d.u64("header: tensor count")
	if err != nil {
		return err
	}
	nKV, err := d.count("header: metadata count", minKVBytes)
	if err != nil {
		return err
	}
	if err := f.parseKV(d, nKV); err != nil {
		return err
	}
	if err := f.parseAlignment(); err != nil {
		return err
	}
	if nTensors > uint64(d.left()/minTensorBytes) {
		return fmt.Errorf("header: tensor count %d cannot fit in the %d bytes left after the metadata", nTensors, d.left())
	}
	if err := f.parseTensorInfos(d, int(nTensors)); err != nil {
		return err
	}
	start, _ := alignUp(uint64(d.off), uint64(f.Alignment)) // off <= len(data): cannot overflow
	f.DataOffset = int64(start)
	if len(f.Tensors) > 0 && start > uint64(len(f.data)) {
		return fmt.Errorf("data section starts at offset %d, past end of file (size %d)", start, len(f.data))
	}
	return f.checkTensorData()
}

func (f *File) parseKV(d *decoder, n int) error {
	f.KV = make([]KV, 0, min(n, maxPrealloc))
	f.kvIndex = make(map[string]int, min(n, maxPrealloc))
	for i := range n {
		key, err := d.str("key")
		if err != nil {
			return fmt.Errorf("kv %d: %w", i, err)
		}
		if j, dup := f.kvIndex[key]; dup {
			return fmt.Errorf("kv %d %q: duplicate key (also kv %d)", i, key, j)
		}
		t, err := d.valueType("value type")
		if err != nil {
			return fmt.Errorf("kv %d %q: %w", i, key, err)
		}
		v, err := d.value(t, 0)
		if err != nil {
			return fmt.Errorf("kv %d %q: %w", i, key, err)
		}
		f.kvIndex[key] = i
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	return nil
}

func (f *File) parseAlignment() error {
	f.Alignment = DefaultAlignment
	v, ok := f.Get(KeyAlignment)
	if !ok {
		return nil
	}
	a, err := checkAlignment(v)
	if err != nil {
		return fmt.Errorf("kv %q: %w", KeyAlignment, err)
	}
	f.Alignment = a
	return nil
}

// checkAlignment validates a general.alignment value: a UINT32 power of two.
func checkAlignment(v Value) (int, error) {
	if v.Type != Uint32Type {
		return 0, fmt.Errorf("alignment has type %s, want UINT32", v.Type)
	}
	a, ok := v.Uint64()
	if !ok || a == 0 || a&(a-1) != 0 {
		return 0, fmt.Errorf("alignment %d is not a power of two", a)
	}
	return int(a), nil
}

func (f *File) parseTensorInfos(d *decoder, n int) error {
	f.Tensors = make([]TensorInfo, 0, min(n, maxPrealloc))
	f.tIndex = make(map[string]int, min(n, maxPrealloc))
	for i := range n {
		name, err := d.str("name")
		if err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		ti, err := readTensorInfo(d, name)
		if err != nil {
			return fmt.Errorf("tensor %d %q: %w", i, name, err)
		}
		if j, dup := f.tIndex[name]; dup {
			return fmt.Errorf("tensor %d %q: duplicate name (also tensor %d)", i, name, j)
		}
		f.tIndex[name] = i
		f.Tensors = append(f.Tensors, ti)
	}
	return nil
}

// readTensorInfo reads a tensor info after its name.
func readTensorInfo(d *decoder, name string) (TensorInfo, error) {
	ti := TensorInfo{Name: name}
	nDims, err := d.u32("dimension count")
	if err != nil {
		return ti, err
	}
	if nDims > MaxDims {
		return ti, fmt.Errorf("dimension count %d is more than %d", nDims, MaxDims)
	}
	ti.Dims = make([]uint64, nDims)
	for j := range ti.Dims {
		if ti.Dims[j], err = d.u64(fmt.Sprintf("dimension %d", j)); err != nil {
			return ti, err
		}
		if ti.Dims[j] > math.MaxInt64 {
			return ti, fmt.Errorf("dimension %d is %d, more than int64 holds", j, ti.Dims[j])
		}
	}
	if _, ok := elementCount(ti.Dims); !ok {
		return ti, fmt.Errorf("dimensions %v: element count overflows int64", ti.Dims)
	}
	typ, err := d.u32("type")
	if err != nil {
		return ti, err
	}
	ti.Type = quant.Type(typ)
	if ti.Offset, err = d.u64("data offset"); err != nil {
		return ti, err
	}
	return ti, nil
}

// checkTensorData checks that every tensor's data is aligned, inside the file and apart
// from every other tensor's. A tensor of an unknown type only has its offset checked.
func (f *File) checkTensorData() error {
	type span struct{ i, start, end uint64 }
	spans := make([]span, 0, len(f.Tensors))
	avail := uint64(len(f.data)) - min(uint64(f.DataOffset), uint64(len(f.data)))
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if ti.Offset%uint64(f.Alignment) != 0 {
			return fmt.Errorf("tensor %d %q: data offset %d is not a multiple of the alignment %d", i, ti.Name, ti.Offset, f.Alignment)
		}
		if ti.Offset > avail {
			return fmt.Errorf("tensor %d %q: data offset %d past end of file (size %d, data section %d bytes)", i, ti.Name, ti.Offset, len(f.data), avail)
		}
		if !ti.Type.GGML() {
			continue
		}
		size, err := ti.Size()
		if err != nil {
			return fmt.Errorf("tensor %d %q: %w", i, ti.Name, err)
		}
		if size > avail-ti.Offset {
			return fmt.Errorf("tensor %d %q: data at offset %d of %d bytes runs past end of file (size %d, data section %d bytes)", i, ti.Name, ti.Offset, size, len(f.data), avail)
		}
		spans = append(spans, span{uint64(i), ti.Offset, ti.Offset + size})
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].start < spans[b].start })
	for k := 1; k < len(spans); k++ {
		prev, cur := spans[k-1], spans[k]
		if cur.start < prev.end {
			return fmt.Errorf("tensor %d %q: data at offset %d overlaps tensor %d %q (offset %d, %d bytes)",
				cur.i, f.Tensors[cur.i].Name, cur.start, prev.i, f.Tensors[prev.i].Name, prev.start, prev.end-prev.start)
		}
	}
	return nil
}

// Get returns the value of a metadata key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// GetString returns the value of a STRING key.
func (f *File) GetString(key string) (string, bool) {
	v, _ := f.Get(key)
	return v.String()
}

// GetUint64 returns the value of a non-negative integer key of any integer type.
func (f *File) GetUint64(key string) (uint64, bool) {
	v, _ := f.Get(key)
	return v.Uint64()
}

// GetInt64 returns the value of an integer key of any integer type.
func (f *File) GetInt64(key string) (int64, bool) {
	v, _ := f.Get(key)
	return v.Int64()
}

// GetFloat64 returns the value of a numeric key of any numeric type.
func (f *File) GetFloat64(key string) (float64, bool) {
	v, _ := f.Get(key)
	return v.Float64()
}

// GetBool returns the value of a BOOL key.
func (f *File) GetBool(key string) (bool, bool) {
	v, _ := f.Get(key)
	return v.Bool()
}

// GetStrings returns the value of an array-of-strings key.
func (f *File) GetStrings(key string) ([]string, bool) {
	v, _ := f.Get(key)
	return v.Strings()
}

// GetFloat32s returns the value of a numeric array key as float32s (see Value.Float32s).
func (f *File) GetFloat32s(key string) ([]float32, bool) {
	v, _ := f.Get(key)
	return v.Float32s()
}

// GetInt32s returns the value of an integer array key as int32s (see Value.Int32s).
func (f *File) GetInt32s(key string) ([]int32, bool) {
	v, _ := f.Get(key)
	return v.Int32s()
}

// Architecture returns general.architecture, or "" when the file has none.
func (f *File) Architecture() string {
	s, _ := f.GetString(KeyArchitecture)
	return s
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns the bytes of a tensor's data: a slice of the file's bytes (the
// read-only mapping, for a file from Open), not a copy, with its capacity capped so that
// appending to it copies. It fails for a tensor type this build does not know, for data
// outside the file, and after Close.
func (f *File) TensorData(ti *TensorInfo) ([]byte, error) {
	if f.closed {
		return nil, fmt.Errorf("gguf %s: tensor %q: file is closed", f.Path, ti.Name)
	}
	size, err := ti.Size()
	if err != nil {
		return nil, fmt.Errorf("gguf %s: tensor %q: %w", f.Path, ti.Name, err)
	}
	start := uint64(f.DataOffset) + ti.Offset
	if start < ti.Offset || start > uint64(len(f.data)) || size > uint64(len(f.data))-start {
		return nil, fmt.Errorf("gguf %s: tensor %q: data at offset %d of %d bytes runs past end of file (size %d)",
			f.Path, ti.Name, ti.Offset, size, len(f.data))
	}
	return f.data[start : start+size : start+size], nil
}
