package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/mmap"
)

// MaxHeaderSize bounds the JSON header; larger headers are rejected as corrupt.
const MaxHeaderSize = 100 << 20

// metadataKey is the header entry holding free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo is one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	// Shape lists dimensions outermost first; an empty shape is a scalar.
	Shape []int
	// Offset is the tensor's byte offset from the start of the file.
	Offset int64
	// Data holds the tensor's bytes, a slice of the file's read-only mapping when opened
	// with Open. It must not be written to.
	Data []byte
}

// Elements returns the number of elements, the product of Shape.
func (t *TensorInfo) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is a parsed safetensors file.
type File struct {
	// Path is the file's path (or the name given to Parse), used in error messages.
	Path string
	// Metadata is the header's "__metadata__" map; nil when absent.
	Metadata map[string]string
	// Tensors lists the tensors in the order of their data in the file.
	Tensors []TensorInfo
	// HeaderSize is the length of the JSON header in bytes (without the 8-byte prefix).
	HeaderSize int

	index map[string]int
	unmap func() error
}

// Open memory-maps the safetensors file at path and parses its header. Tensor data stay
// valid until Close.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors %s: not a regular file", path)
	}
	// Check the header length before mapping so that a wrong file fails cheaply.
	var prefix [8]byte
	if _, err := f.ReadAt(prefix[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header length (file is %d bytes): %w", path, st.Size(), err)
	}
	if _, err := headerLen(prefix[:], st.Size()); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	data, unmap, err := mmap.File(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	file, err := Parse(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	file.unmap = unmap
	return file, nil
}

// headerLen decodes and checks the 8-byte header length against the file size.
func headerLen(prefix []byte, fileSize int64) (int, error) {
	if fileSize < 8 || len(prefix) < 8 {
		return 0, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", fileSize)
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > MaxHeaderSize {
		return 0, fmt.Errorf("header length %d exceeds the %d byte limit", n, MaxHeaderSize)
	}
	if int64(n) > fileSize-8 {
		return 0, fmt.Errorf("header length %d exceeds the %d bytes after the length prefix", n, fileSize-8)
	}
	return int(n), nil
}

// headerEntry is one tensor's description in the JSON header.
type headerEntry struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// Parse parses a whole safetensors file held in data; name is used in error messages.
// Tensor data are slices of data, not copies.
func Parse(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", name, err)
	}
	return f, nil
}

func parse(name string, data []byte) (*File, error) {
	n, err := headerLen(data, int64(len(data)))
	if err != nil {
		return nil, err
	}
	header := data[8 : 8+n]
	if !bytes.HasPrefix(header, []byte("{")) {
		return nil, errors.New("header does not start with '{'")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	f := &File{Path: name, HeaderSize: n, index: make(map[string]int, len(raw))}
	if m, ok := raw[metadataKey]; ok {
		if err := json.Unmarshal(m, &f.Metadata); err != nil {
			return nil, fmt.Errorf("header: %s must map strings to strings: %w", metadataKey, err)
		}
		delete(raw, metadataKey)
	}
	body := data[8+n:]
	entries := make([]placed, 0, len(raw))
	for tname, msg := range raw {
		var e headerEntry
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", tname, err)
		}
		p, err := checkEntry(tname, e, int64(len(body)))
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", tname, err)
		}
		entries = append(entries, p)
	}
	// Order by data offsets (empty tensors first, then names, break ties) and require the
	// tensors to tile the data area exactly, as the reference implementation does.
	sort.Slice(entries, func(a, b int) bool {
		ea, eb := entries[a], entries[b]
		if ea.begin != eb.begin {
			return ea.begin < eb.begin
		}
		if ea.size != eb.size {
			return ea.size < eb.size
		}
		return ea.t.Name < eb.t.Name
	})
	f.Tensors = make([]TensorInfo, len(entries))
	var pos int64
	for i, p := range entries {
		if p.begin < pos {
			return nil, fmt.Errorf("tensor %q: data_offsets begin %d overlaps the previous tensor, which ends at %d", p.t.Name, p.begin, pos)
		}
		if p.begin > pos {
			return nil, fmt.Errorf("tensor %q: data_offsets begin %d leaves a gap after byte %d", p.t.Name, p.begin, pos)
		}
		end := pos + p.size
		p.t.Data = body[pos:end:end]
		p.t.Offset = int64(8+n) + pos
		pos = end
		f.Tensors[i] = p.t
		f.index[p.t.Name] = i
	}
	if pos != int64(len(body)) {
		return nil, fmt.Errorf("tensors cover %d bytes of the %d bytes of data", pos, len(body))
	}
	return f, nil
}

// placed is a checked header entry waiting to be placed in the data area.
type placed struct {
	t           TensorInfo
	begin, size int64
}

// checkEntry validates one header entry against the size of the data area.
func checkEntry(name string, e headerEntry, bodyLen int64) (placed, error) {
	size := int64(e.DType.Size())
	if size == 0 {
		return placed{}, fmt.Errorf("unknown dtype %q", e.DType)
	}
	if e.Shape == nil {
		return placed{}, errors.New("shape missing")
	}
	if len(e.DataOffsets) != 2 {
		return placed{}, fmt.Errorf("data_offsets has %d values, want 2", len(e.DataOffsets))
	}
	begin, end := e.DataOffsets[0], e.DataOffsets[1]
	if begin < 0 || end < begin || end > bodyLen {
		return placed{}, fmt.Errorf("data_offsets [%d, %d] out of bounds of %d data bytes", begin, end, bodyLen)
	}
	shape := make([]int, len(e.Shape))
	nbytes := size
	for i, d := range e.Shape {
		if d < 0 {
			return placed{}, fmt.Errorf("shape %v has a negative dimension", e.Shape)
		}
		if d != 0 && nbytes > math.MaxInt64/d {
			return placed{}, fmt.Errorf("shape %v overflows", e.Shape)
		}
		nbytes *= d
		shape[i] = int(d)
	}
	if nbytes != end-begin {
		return placed{}, fmt.Errorf("%s %v needs %d bytes but data_offsets [%d, %d] hold %d", e.DType, e.Shape, nbytes, begin, end, end-begin)
	}
	return placed{t: TensorInfo{Name: name, DType: e.DType, Shape: shape}, begin: begin, size: nbytes}, nil
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string {
	names := make([]string, len(f.Tensors))
	for i, t := range f.Tensors {
		names[i] = t.Name
	}
	slices.Sort(names)
	return names
}

// Close releases the file mapping; tensor data must not be used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	f.Tensors, f.index = nil, nil
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", f.Path, err)
	}
	return nil
}

// validName reports whether a shard file name from an index is a plain file name.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}
