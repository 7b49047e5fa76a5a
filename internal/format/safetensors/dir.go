package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Standard file names in a Hugging Face model folder.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// Index is the content of model.safetensors.index.json.
type Index struct {
	// Metadata usually holds "total_size", the sum of all tensors' bytes.
	Metadata map[string]any `json:"metadata"`
	// WeightMap maps each tensor name to the shard file holding it.
	WeightMap map[string]string `json:"weight_map"`
}

// ParseIndex decodes a shard index and checks that it names plain files in its folder.
func ParseIndex(data []byte) (*Index, error) {
	var idx Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, err
	}
	if len(idx.WeightMap) == 0 {
		return nil, errors.New("weight_map is missing or empty")
	}
	for name, shard := range idx.WeightMap {
		if !validName(shard) {
			return nil, fmt.Errorf("tensor %q: shard %q is not a plain file name", name, shard)
		}
	}
	return &idx, nil
}

// Shards returns the distinct shard file names of the index in sorted order.
func (idx *Index) Shards() []string {
	var shards []string
	for _, s := range idx.WeightMap {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	return slices.Compact(shards)
}

// Set is the tensors of a model folder, from one file or several shards, seen as one.
type Set struct {
	// Dir is the folder the set was opened from.
	Dir string
	// Files lists the open files (one per shard), in shard name order.
	Files []*File
	// Index is the parsed shard index; nil for a single file.
	Index *Index

	byName map[string]*TensorInfo
	fileOf map[string]int // tensor name to its index in Files
	names  []string
}

// OpenDir opens the safetensors model in dir: the shards listed by
// model.safetensors.index.json when present, otherwise model.safetensors, otherwise the only
// *.safetensors file in the folder.
func OpenDir(dir string) (*Set, error) {
	s, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", dir, err)
	}
	return s, nil
}

func openDir(dir string) (*Set, error) {
	s := &Set{Dir: dir, byName: map[string]*TensorInfo{}, fileOf: map[string]int{}}
	indexPath := filepath.Join(dir, IndexFileName)
	data, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		idx, err := ParseIndex(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", IndexFileName, err)
		}
		s.Index = idx
		for _, shard := range idx.Shards() {
			if err := s.add(filepath.Join(dir, shard)); err != nil {
				s.Close()
				return nil, err
			}
		}
		// Every tensor the index lists must be in the shard it names.
		for name, shard := range idx.WeightMap {
			fi, ok := s.fileOf[name]
			if !ok {
				s.Close()
				return nil, fmt.Errorf("%s lists tensor %q in %s, which does not hold it", IndexFileName, name, shard)
			}
			if got := filepath.Base(s.Files[fi].Path); got != shard {
				s.Close()
				return nil, fmt.Errorf("%s lists tensor %q in %s, but it is in %s", IndexFileName, name, shard, got)
			}
		}
	case errors.Is(err, os.ErrNotExist):
		path := filepath.Join(dir, SingleFileName)
		if _, err := os.Stat(path); err != nil {
			matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if len(matches) != 1 {
				return nil, fmt.Errorf("no %s, no %s, and %d other .safetensors files", IndexFileName, SingleFileName, len(matches))
			}
			path = matches[0]
		}
		if err := s.add(path); err != nil {
			s.Close()
			return nil, err
		}
	default:
		return nil, err
	}
	for name := range s.byName {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	return s, nil
}

// add opens one file and adds its tensors, refusing a name already seen in another file.
func (s *Set) add(path string) error {
	f, err := Open(path)
	if err != nil {
		return err
	}
	s.Files = append(s.Files, f)
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if prev, dup := s.fileOf[t.Name]; dup {
			return fmt.Errorf("tensor %q is in both %s and %s", t.Name, filepath.Base(s.Files[prev].Path), filepath.Base(path))
		}
		s.byName[t.Name] = t
		s.fileOf[t.Name] = len(s.Files) - 1
	}
	return nil
}

// Tensor returns the tensor with the given name from whichever file holds it.
func (s *Set) Tensor(name string) (*TensorInfo, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// Names returns all tensor names in sorted order.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Metadata returns the "__metadata__" of the first file (shards normally repeat it).
func (s *Set) Metadata() map[string]string {
	if len(s.Files) == 0 {
		return nil
	}
	return s.Files[0].Metadata
}

// Close releases every file of the set; tensor data must not be used afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.Files {
		errs = append(errs, f.Close())
	}
	s.Files, s.byName, s.fileOf, s.names = nil, nil, nil, nil
	return errors.Join(errs...)
}
