package lora

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// Open reads the adapter at path for a base model of config c: a PEFT folder, or a
// llama.cpp GGUF LoRA file. maxRank (0: no bound) limits its rank.
func Open(path string, c format.Config, maxRank int) (*Adapter, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	if st.IsDir() {
		return OpenPEFT(path, c, maxRank)
	}
	return OpenGGUF(path, c, maxRank)
}

// Errors of the registry, for a server to map onto HTTP statuses.
var (
	// ErrExists is returned when loading a name already loaded.
	ErrExists = errors.New("an adapter of that name is loaded")
	// ErrNotFound is returned for a name that is not loaded.
	ErrNotFound = errors.New("no adapter of that name is loaded")
)

// Registry is the set of adapters a server has loaded, by name, for one base model. It is
// safe for concurrent use. Unloading drops the name only: a request that holds the
// adapter keeps it (and its weights) until it finishes.
type Registry struct {
	base    format.Config
	maxRank int

	mu     sync.Mutex
	byName map[string]*Adapter
	order  []string // load order
	nextID uint64
}

// NewRegistry makes an empty registry of adapters for a base of config base, each of rank
// at most maxRank (0: no bound).
func NewRegistry(base format.Config, maxRank int) *Registry {
	return &Registry{base: base, maxRank: maxRank, byName: map[string]*Adapter{}}
}

// MaxRank returns the rank bound adapters are loaded under (0: none).
func (r *Registry) MaxRank() int { return r.maxRank }

// Load reads the adapter at path and registers it under name.
func (r *Registry) Load(name, path string) (*Adapter, error) {
	if name == "" {
		return nil, fmt.Errorf("lora: an adapter needs a name")
	}
	r.mu.Lock()
	_, dup := r.byName[name]
	r.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("lora %q: %w", name, ErrExists)
	}
	a, err := Open(path, r.base, r.maxRank)
	if err != nil {
		return nil, err
	}
	return a, r.Add(name, a)
}

// Add registers an adapter read elsewhere under name, giving it its ID.
func (r *Registry) Add(name string, a *Adapter) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byName[name]; dup {
		return fmt.Errorf("lora %q: %w", name, ErrExists)
	}
	r.nextID++
	a.Name, a.ID = name, r.nextID
	r.byName[name] = a
	r.order = append(r.order, name)
	return nil
}

// Unload drops the adapter registered under name.
func (r *Registry) Unload(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byName[name]; !ok {
		return fmt.Errorf("lora %q: %w", name, ErrNotFound)
	}
	delete(r.byName, name)
	r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == name })
	return nil
}

// Get returns the adapter registered under name.
func (r *Registry) Get(name string) (*Adapter, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.byName[name]
	return a, ok
}

// List returns the registered adapters in load order.
func (r *Registry) List() []*Adapter {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Adapter, len(r.order))
	for i, n := range r.order {
		out[i] = r.byName[n]
	}
	return out
}
