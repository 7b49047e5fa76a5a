package structured

import (
	"container/list"
	"crypto/sha256"
	"fmt"
	"sync"
)

// FrontEnd turns grammar source text into a Grammar (ParseGBNF, ParseRegex, ParseEBNF and
// the JSON Schema compiler are front ends).
type FrontEnd func(src []byte) (*Grammar, error)

// Cache holds compiled grammars bound to tokenizers, keyed by (front end name, a hash of the
// source, the tokenizer's identity), so a repeated schema or grammar compiles once. It keeps
// at most a fixed number of entries, evicting the least recently used; failed compiles are
// cached too. Concurrent requests for one key wait for a single compile. It is safe for
// concurrent use.
type Cache struct {
	limits Limits
	max    int
	check  func(*TokenGrammar) error

	mu      sync.Mutex
	entries map[cacheKey]*list.Element
	order   *list.List // front: most recently used; values are *cacheEntry
}

type cacheKey struct {
	kind  string
	src   [sha256.Size]byte
	vocab string
}

type cacheEntry struct {
	key  cacheKey
	done chan struct{}
	g    *TokenGrammar
	err  error
}

// NewCache returns a cache of at most max entries compiling within lim. check, when not nil,
// judges each grammar once after it compiles (a mask-time probe, say); a grammar it refuses
// is cached as a failed compile, with its error.
func NewCache(max int, lim Limits, check func(*TokenGrammar) error) *Cache {
	return &Cache{limits: lim, max: max, check: check, entries: map[cacheKey]*list.Element{}, order: list.New()}
}

// Get returns src compiled by front end fe (named kind) for trie and vocab, compiling it on
// a miss.
func (c *Cache) Get(kind string, fe FrontEnd, src []byte, trie *TokenTrie, vocab Vocabulary) (*TokenGrammar, error) {
	key := cacheKey{kind: kind, src: sha256.Sum256(src), vocab: trie.id}
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		<-e.done
		return e.g, e.err
	}
	e := &cacheEntry{key: key, done: make(chan struct{})}
	c.entries[key] = c.order.PushFront(e)
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).key)
	}
	c.mu.Unlock()

	g, err := fe(src)
	if err == nil {
		var comp *Compiled
		if comp, err = Compile(g, c.limits); err == nil {
			e.g = NewTokenGrammar(comp, trie, vocab)
			if c.check != nil {
				if err = c.check(e.g); err != nil {
					e.g = nil
				}
			}
		}
	}
	if err != nil {
		e.err = fmt.Errorf("%s grammar: %w", kind, err)
	}
	close(e.done)
	return e.g, e.err
}

// Len returns the number of entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
