// Package imatrix reads and writes importance matrices in the legacy binary format of
// llama.cpp's llama-imatrix (the .dat files llama-quantize --imatrix reads): for each
// weight matrix, the mean square of each of its input channels over calibration text.
// Quantizers weigh each weight's rounding error by its channel's importance.
//
// The layout, all integers int32 and floats float32, little-endian:
//
//	n_entries
//	n_entries times: name_len, name bytes, ncall, nval, nval values
//	last_chunk (the chunks the matrix was computed from)
//	dataset_len, dataset bytes (the calibration file's name)
//
// A value is the channel's mean square times ncall; readers divide by ncall.
package imatrix

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Entry is one weight matrix's importance: Values as stored (mean squares times NCall).
type Entry struct {
	Name   string
	NCall  int32
	Values []float32
}

// File is an importance matrix file.
type File struct {
	Entries   []Entry
	LastChunk int32
	Dataset   string
}

// Limits on what Parse accepts, against hostile files.
const (
	maxEntries = 1 << 16
	maxName    = 1 << 12
	maxValues  = 1 << 26
)

// Importance returns each matrix's per-channel mean squares (stored values / ncall), as
// llama-quantize reads them.
func (f *File) Importance() map[string][]float32 {
	out := make(map[string][]float32, len(f.Entries))
	for _, e := range f.Entries {
		v := make([]float32, len(e.Values))
		for i, x := range e.Values {
			if e.NCall > 0 {
				x /= float32(e.NCall)
			}
			v[i] = x
		}
		out[e.Name] = v
	}
	return out
}

// Marshal encodes f, entries sorted by name as llama-imatrix writes them.
func (f *File) Marshal() []byte {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	entries := append([]Entry(nil), f.Entries...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	w(int32(len(entries)))
	for _, e := range entries {
		w(int32(len(e.Name)))
		b.WriteString(e.Name)
		w(e.NCall)
		w(int32(len(e.Values)))
		w(e.Values)
	}
	w(f.LastChunk)
	w(int32(len(f.Dataset)))
	b.WriteString(f.Dataset)
	return b.Bytes()
}

// Write writes f to path through a temporary file renamed into place, so that a failure
// leaves no partial file.
func Write(path string, f *File) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("imatrix: %w", err)
	}
	_, err = tmp.Write(f.Marshal())
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("imatrix: %w", err)
	}
	return nil
}

// Read reads an importance matrix file.
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("imatrix %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes the legacy format. The trailing chunk count and dataset name are
// optional, as in llama.cpp's reader; anything after them is an error.
func Parse(b []byte) (*File, error) {
	r := bytes.NewReader(b)
	i32 := func(what string) (int32, error) {
		var v int32
		if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
			return 0, fmt.Errorf("truncated at the %s (offset %d)", what, len(b)-r.Len())
		}
		return v, nil
	}
	n, err := i32("entry count")
	if err != nil {
		return nil, err
	}
	if n < 0 || n > maxEntries {
		return nil, fmt.Errorf("%d entries: want 0..%d", n, maxEntries)
	}
	f := &File{}
	seen := map[string]bool{}
	for i := range int(n) {
		l, err := i32("name length")
		if err != nil {
			return nil, err
		}
		if l <= 0 || l > maxName || int(l) > r.Len() {
			return nil, fmt.Errorf("entry %d: name length %d", i, l)
		}
		name := make([]byte, l)
		r.Read(name)
		var e Entry
		e.Name = string(name)
		if seen[e.Name] {
			return nil, fmt.Errorf("entry %d: %q appears twice", i, e.Name)
		}
		seen[e.Name] = true
		if e.NCall, err = i32("call count"); err != nil {
			return nil, err
		}
		nval, err := i32("value count")
		if err != nil {
			return nil, err
		}
		if e.NCall < 0 || nval <= 0 || nval > maxValues || 4*int(nval) > r.Len() {
			return nil, fmt.Errorf("entry %q: %d calls, %d values (%d bytes left)", e.Name, e.NCall, nval, r.Len())
		}
		e.Values = make([]float32, nval)
		binary.Read(r, binary.LittleEndian, e.Values)
		for j, v := range e.Values {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v < 0 {
				return nil, fmt.Errorf("entry %q: value %d is %g", e.Name, j, v)
			}
		}
		f.Entries = append(f.Entries, e)
	}
	if r.Len() == 0 {
		return f, nil
	}
	if f.LastChunk, err = i32("chunk count"); err != nil {
		return nil, err
	}
	if r.Len() == 0 {
		return f, nil
	}
	l, err := i32("dataset name length")
	if err != nil {
		return nil, err
	}
	if l < 0 || int(l) != r.Len() {
		return nil, fmt.Errorf("dataset name of %d bytes with %d left", l, r.Len())
	}
	name := make([]byte, l)
	r.Read(name)
	f.Dataset = string(name)
	return f, nil
}

// Collector accumulates the sums of squares of the inputs of named weight matrices.
type Collector struct {
	sums   map[string][]float64
	counts map[string]int64
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{sums: map[string][]float64{}, counts: map[string]int64{}}
}

// Add adds rows of inputs (tokens x cols, row-major) to the statistics of name.
func (c *Collector) Add(name string, rows []float32, cols int) error {
	s := c.sums[name]
	if s == nil {
		s = make([]float64, cols)
		c.sums[name] = s
	} else if len(s) != cols {
		return fmt.Errorf("imatrix: %s: inputs of %d columns after %d", name, cols, len(s))
	}
	for t := 0; t+cols <= len(rows); t += cols {
		for j, v := range rows[t : t+cols] {
			s[j] += float64(v) * float64(v)
		}
	}
	c.counts[name] += int64(len(rows) / cols)
	return nil
}

// File returns the collected statistics as llama-imatrix would store them after chunks
// chunks of chunkSize tokens of the named dataset.
func (c *Collector) File(chunkSize int, chunks int, dataset string) *File {
	f := &File{LastChunk: int32(chunks), Dataset: dataset}
	for name, s := range c.sums {
		count := c.counts[name]
		if count == 0 {
			continue
		}
		ncall := int32((count + int64(chunkSize) - 1) / int64(chunkSize))
		e := Entry{Name: name, NCall: ncall, Values: make([]float32, len(s))}
		for j, v := range s {
			e.Values[j] = float32(v / float64(count) * float64(ncall))
		}
		f.Entries = append(f.Entries, e)
	}
	sort.Slice(f.Entries, func(i, j int) bool { return f.Entries[i].Name < f.Entries[j].Name })
	return f
}
