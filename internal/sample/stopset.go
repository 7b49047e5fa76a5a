package sample

import (
	"slices"
	"strings"
)

// StopSet is a request's stop strings compiled once into an Aho-Corasick automaton: a trie
// of the strings with, at every node, a failure link to the node of its longest proper
// suffix that is also in the trie. A matcher walks it one byte at a time, so matching costs
// the same per byte of text whatever the number of stop strings. A StopSet is immutable
// once built and shared by all the choices of a request (each has its own StopMatcher).
//
// Node 0 is the root. The children of node v are edges[nodes[v].first:nodes[v].end],
// sorted by byte. A node with many children (the root, and the shallow nodes a large set
// has) also indexes them by byte in a table of 256 entries, so that no step searches more
// than a few edges; as such a node has at least denseChildren children, the tables take at
// most 1 KiB per denseChildren nodes. What a step reads of a node sits in one record, so
// that a walk over a large set touches few cache lines.
type StopSet struct {
	stops []string // the stop strings as given (not copied); empty ones are ignored
	nodes []stopNode
	edges []stopEdge
	dense []int32 // the byte tables, 256 entries each: a child's id, or 0 for none
	depth []int32 // per node: the length of the text it spells
}

// denseChildren is the number of children from which a node gets a byte table.
const denseChildren = 12

// stopNode is one node of a StopSet: its edges, its failure link, and the stop string (an
// index into stops) that ends at it: its own, or the longest of those its failure chain
// reaches (-1: none).
type stopNode struct {
	first, end  int32
	fail, match int32
	dense       int32 // the offset of its byte table in dense, or -1
}

// stopEdge is an edge of the trie: the byte it reads and the node it leads to.
type stopEdge struct {
	b     byte
	child int32
}

// NewStopSet compiles stops (empty strings are ignored). The set refers to stops, which
// must not change afterwards. Building costs O(total bytes x log(count)) once; it returns
// nil when no stop string is left, and a nil *StopSet matches nothing.
func NewStopSet(stops []string) *StopSet {
	order := make([]int32, 0, len(stops))
	total := 0 // bounds the nodes: one per byte at most, and the root
	for i, s := range stops {
		if s != "" {
			order = append(order, int32(i))
			total += len(s)
		}
	}
	if len(order) == 0 {
		return nil
	}
	// Inserting the strings in sorted order creates every node's children in byte order;
	// a stable sort keeps the lowest index first among equal strings, so it is the one a
	// match reports.
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(stops[a], stops[b]) })
	s := &StopSet{stops: stops}
	parent, label := s.buildTrie(order, total+1)
	s.linkEdges(parent, label)
	s.linkFailures()
	return s
}

// buildTrie inserts the stop strings of order (sorted) into a trie of at most maxNodes
// nodes and returns each node's parent and incoming byte. It fills depth and the nodes' own
// matches.
func (s *StopSet) buildTrie(order []int32, maxNodes int) (parent []int32, label []byte) {
	parent, label = make([]int32, 1, maxNodes), make([]byte, 1, maxNodes)
	s.depth, s.nodes = make([]int32, 1, maxNodes), make([]stopNode, 1, maxNodes)
	parent[0], s.nodes[0].match = -1, -1
	path := []int32{0} // the nodes spelling the previous string, root first
	prev := ""
	for _, idx := range order {
		str := s.stops[idx]
		common := 0
		for common < len(prev) && common < len(str) && prev[common] == str[common] {
			common++
		}
		path = path[:common+1]
		for j := common; j < len(str); j++ {
			id := int32(len(parent))
			parent = append(parent, path[j])
			label = append(label, str[j])
			s.depth = append(s.depth, int32(j+1))
			s.nodes = append(s.nodes, stopNode{match: -1})
			path = append(path, id)
		}
		if end := &s.nodes[path[len(str)]]; end.match < 0 {
			end.match = idx
		}
		prev = str
	}
	return parent, label
}

// linkEdges lays the children of every node out contiguously, in byte order: nodes were
// created in sorted order, so walking them by id meets each node's children by byte.
func (s *StopSet) linkEdges(parent []int32, label []byte) {
	n := len(parent)
	count := make([]int32, n)
	for v := 1; v < n; v++ {
		count[parent[v]]++
	}
	tables := 0
	for v := range s.nodes {
		if v == 0 || count[v] >= denseChildren {
			tables++
		}
	}
	s.dense = make([]int32, 0, 256*tables)
	at := int32(0)
	for v := range s.nodes {
		nv := &s.nodes[v]
		nv.first, nv.end, nv.dense = at, at, -1
		at += count[v]
		if v == 0 || count[v] >= denseChildren {
			nv.dense = int32(len(s.dense))
			s.dense = s.dense[:len(s.dense)+256]
		}
	}
	s.edges = make([]stopEdge, n-1)
	for v := 1; v < n; v++ {
		p := &s.nodes[parent[v]]
		s.edges[p.end] = stopEdge{b: label[v], child: int32(v)}
		p.end++
		if p.dense >= 0 {
			s.dense[p.dense+int32(label[v])] = int32(v)
		}
	}
}

// linkFailures sets the failure links breadth first (a node's link is shallower than the
// node, so it is ready when the node's children need it) and carries every node's match
// down its failure link when it has none of its own.
func (s *StopSet) linkFailures() {
	queue := make([]int32, 0, len(s.nodes))
	for _, e := range s.edges[s.nodes[0].first:s.nodes[0].end] {
		queue = append(queue, e.child)
	}
	for i := 0; i < len(queue); i++ {
		v := queue[i]
		nv := s.nodes[v]
		for _, e := range s.edges[nv.first:nv.end] {
			c := &s.nodes[e.child]
			c.fail = s.step(nv.fail, e.b)
			if c.match < 0 {
				c.match = s.nodes[c.fail].match
			}
			queue = append(queue, e.child)
		}
	}
}

// child returns v's child by byte b, or 0 (the root is no one's child) for none.
func (s *StopSet) child(v int32, b byte) int32 {
	nv := &s.nodes[v]
	if nv.dense >= 0 {
		return s.dense[nv.dense+int32(b)]
	}
	lo, hi := nv.first, nv.end
	for lo < hi {
		mid := int32(uint32(lo+hi) >> 1)
		switch e := s.edges[mid]; {
		case e.b == b:
			return e.child
		case e.b < b:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0
}

// step is the automaton's transition from node v on byte b: the deepest node spelling a
// suffix of v's text followed by b (the root when there is none).
func (s *StopSet) step(v int32, b byte) int32 {
	for v != 0 {
		if c := s.child(v, b); c != 0 {
			return c
		}
		v = s.nodes[v].fail
	}
	return s.dense[b] // the root's table is the first
}

// Matcher returns a new matcher of the set for one choice; includeStop keeps a matched stop
// string in the emitted text. A nil set gives a matcher that passes text through.
func (s *StopSet) Matcher(includeStop bool) *StopMatcher {
	return &StopMatcher{set: s, includeStop: includeStop}
}
