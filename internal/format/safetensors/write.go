package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// WriteTensor is one tensor to write. Give its bytes either as Data or through Stream.
type WriteTensor struct {
	Name  string
	DType DType
	// Shape lists dimensions outermost first.
	Shape []int
	// Data holds the tensor's bytes; used when Stream is nil.
	Data []byte
	// Stream, when set, writes the tensor's bytes to w, exactly Size() of them, so that a
	// large tensor (a converted or dequantized weight) need not be held in memory whole.
	Stream func(w io.Writer) error
}

// Size returns the tensor's size in bytes from its type and shape, or -1 when the type is
// unknown, a dimension negative, or the size overflows.
func (t *WriteTensor) Size() int64 {
	n := int64(t.DType.Size())
	if n == 0 {
		return -1
	}
	for _, d := range t.Shape {
		if d < 0 || (d != 0 && n > math.MaxInt64/int64(d)) {
			return -1
		}
		n *= int64(d)
	}
	return n
}

// Progress is called as bytes of tensor data are written, with the bytes done so far and the
// total over all tensors (and all shards).
type Progress func(done, total int64)

// chunkSize is how much of a tensor's Data is written between progress reports.
const chunkSize = 4 << 20

// Write writes tensors to a safetensors file at path, in sorted name order, with metadata
// (plus "format": "pt" unless metadata sets "format") in "__metadata__". The file is written
// under a temporary name and renamed into place when complete. progress may be nil.
func Write(path string, tensors []WriteTensor, metadata map[string]string, progress Progress) error {
	total, err := checkTensors(tensors)
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	var done int64
	if err := writeFile(path, tensors, metadata, &done, total, progress); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	return nil
}

// Encode writes tensors in the safetensors format to w (see Write).
func Encode(w io.Writer, tensors []WriteTensor, metadata map[string]string, progress Progress) error {
	total, err := checkTensors(tensors)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	var done int64
	if err := encode(w, sortedTensors(tensors), metadata, &done, total, progress); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// WriteSharded writes tensors into dir as shards of at most maxShardBytes of tensor data
// each (a single larger tensor gets a shard of its own), named
// model-00001-of-0000N.safetensors, with model.safetensors.index.json listing where each
// tensor lies. When everything fits in one shard it writes model.safetensors alone, as
// Hugging Face does. Tensors are packed in sorted name order.
func WriteSharded(dir string, tensors []WriteTensor, metadata map[string]string, maxShardBytes int64, progress Progress) error {
	total, err := checkTensors(tensors)
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", dir, err)
	}
	if maxShardBytes <= 0 {
		return fmt.Errorf("safetensors %s: shard size %d must be positive", dir, maxShardBytes)
	}
	sorted := sortedTensors(tensors)
	var shards [][]WriteTensor
	var cur []WriteTensor
	var curBytes int64
	for _, t := range sorted {
		n := t.Size()
		if len(cur) > 0 && curBytes+n > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += n
	}
	shards = append(shards, cur)
	var done int64
	if len(shards) == 1 {
		path := filepath.Join(dir, SingleFileName)
		if err := writeFile(path, shards[0], metadata, &done, total, progress); err != nil {
			return fmt.Errorf("safetensors %s: %w", path, err)
		}
		return nil
	}
	idx := Index{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		path := filepath.Join(dir, name)
		if err := writeFile(path, shard, metadata, &done, total, progress); err != nil {
			return fmt.Errorf("safetensors %s: %w", path, err)
		}
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
		}
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors %s: index: %w", dir, err)
	}
	path := filepath.Join(dir, IndexFileName)
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// checkTensors validates names, types and data sizes and returns the total data size.
func checkTensors(tensors []WriteTensor) (int64, error) {
	seen := make(map[string]bool, len(tensors))
	var total int64
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "":
			return 0, fmt.Errorf("tensor %d has no name", i)
		case t.Name == metadataKey:
			return 0, fmt.Errorf("tensor name %q is reserved", t.Name)
		case seen[t.Name]:
			return 0, fmt.Errorf("tensor %q given twice", t.Name)
		case !t.DType.Valid():
			return 0, fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		seen[t.Name] = true
		n := t.Size()
		if n < 0 {
			return 0, fmt.Errorf("tensor %q: shape %v is invalid", t.Name, t.Shape)
		}
		if t.Stream == nil && int64(len(t.Data)) != n {
			return 0, fmt.Errorf("tensor %q: %s %v needs %d bytes, have %d", t.Name, t.DType, t.Shape, n, len(t.Data))
		}
		total += n
	}
	return total, nil
}

// sortedTensors returns a copy of tensors sorted by name.
func sortedTensors(tensors []WriteTensor) []WriteTensor {
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b WriteTensor) int { return strings.Compare(a.Name, b.Name) })
	return sorted
}

// writeFile writes one file through a temporary file renamed into place.
func writeFile(path string, tensors []WriteTensor, metadata map[string]string, done *int64, total int64, progress Progress) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	err = encode(tmp, sortedTensors(tensors), metadata, done, total, progress)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// header builds the JSON header for sorted tensors, padded with spaces so that the data
// starts at a multiple of 8 bytes.
func header(sorted []WriteTensor, metadata map[string]string) []byte {
	meta := map[string]string{"format": "pt"}
	maps.Copy(meta, metadata)
	var b []byte
	b = append(b, `{"`+metadataKey+`":`...)
	m, _ := json.Marshal(meta) // a map of strings always marshals
	b = append(b, m...)
	var off int64
	for _, t := range sorted {
		name, _ := json.Marshal(t.Name)
		b = append(b, ',')
		b = append(b, name...)
		b = append(b, `:{"dtype":`...)
		b = strconv.AppendQuote(b, string(t.DType))
		b = append(b, `,"shape":[`...)
		for i, d := range t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		end := off + t.Size()
		b = fmt.Appendf(b, `],"data_offsets":[%d,%d]}`, off, end)
		off = end
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	return b
}

// encode writes a whole file for tensors already sorted and checked.
func encode(w io.Writer, sorted []WriteTensor, metadata map[string]string, done *int64, total int64, progress Progress) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	hdr := header(sorted, metadata)
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(hdr)))
	bw.Write(prefix[:])
	bw.Write(hdr)
	for _, t := range sorted {
		if err := writeTensor(bw, t, done, total, progress); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	return bw.Flush()
}

// writeTensor writes one tensor's bytes, reporting progress as it goes.
func writeTensor(w io.Writer, t WriteTensor, done *int64, total int64, progress Progress) error {
	want := t.Size()
	cw := &countWriter{w: w, limit: want, done: done, total: total, progress: progress}
	if t.Stream != nil {
		if err := t.Stream(cw); err != nil {
			return err
		}
	} else {
		for data := t.Data; len(data) > 0; {
			n := min(len(data), chunkSize)
			if _, err := cw.Write(data[:n]); err != nil {
				return err
			}
			data = data[n:]
		}
	}
	if cw.n != want {
		return fmt.Errorf("wrote %d bytes, want %d", cw.n, want)
	}
	return nil
}

// countWriter counts bytes passing through to w and reports progress.
type countWriter struct {
	w        io.Writer
	n        int64
	limit    int64 // the tensor's size; writing past it is an error
	done     *int64
	total    int64
	progress Progress
}

func (c *countWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.limit-c.n {
		return 0, fmt.Errorf("writing past the tensor's %d bytes", c.limit)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	*c.done += int64(n)
	if c.progress != nil && n > 0 {
		c.progress(*c.done, c.total)
	}
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}
