package jsonschema

import (
	"fmt"
	"strconv"
)

// JSONObjectGBNF returns the grammar of OpenAI's response_format {"type": "json_object"}:
// any JSON object, with whitespace as opt allows. maxDepth > 0 bounds how deeply objects and
// arrays nest (the top-level object is depth 1); 0 leaves nesting unbounded.
func JSONObjectGBNF(opt Options, maxDepth int) (string, error) {
	if maxDepth < 0 {
		return "", fmt.Errorf("json object grammar: maxDepth %d is negative", maxDepth)
	}
	c, err := newCompiler(nil, opt)
	if err != nil {
		return "", err
	}
	c.g.names = append(c.g.names, opt.start())
	var inner expr
	if maxDepth == 0 {
		inner = c.anyValue()
	} else {
		// value-d holds the values allowed at depth d: containers only while d < maxDepth.
		inner = c.scalar()
		for d := maxDepth; d >= 2; d-- {
			inner = c.define("value-"+strconv.Itoa(d), c.container(inner))
		}
	}
	c.g.rules[opt.start()] = c.objectOf(inner)
	c.g.prune(c.opt.start())
	return c.g.writeGBNF(), nil
}

// scalar writes a string, number, boolean or null.
func (c *compiler) scalar() expr {
	return newAlt(c.stringRule(), c.numberRule(), lit("true"), lit("false"), lit("null"))
}

// objectOf writes an object whose values are inner.
func (c *compiler) objectOf(inner expr) expr {
	sep := newSeq(c.ws, lit(","), c.ws)
	member := newSeq(c.stringRule(), c.ws, lit(":"), c.ws, inner)
	return newSeq(lit("{"), c.ws, opt(newSeq(member, rep{e: newSeq(sep, member), min: 0, max: -1})), c.ws, lit("}"))
}

// container writes an object or array whose values are inner, or a scalar.
func (c *compiler) container(inner expr) expr {
	sep := newSeq(c.ws, lit(","), c.ws)
	arr := newSeq(lit("["), c.ws, opt(newSeq(inner, rep{e: newSeq(sep, inner), min: 0, max: -1})), c.ws, lit("]"))
	return newAlt(c.objectOf(inner), arr, c.scalar())
}
