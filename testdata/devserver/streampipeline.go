package main

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// stage is one stage after $changeStream: it passes an event on (maybe reshaped) or drops it.
type stage func(event bson.Raw) (bson.Raw, bool)

type pipeline []stage

func (p pipeline) apply(event bson.Raw) (bson.Raw, bool) {
	for _, s := range p {
		var keep bool
		if event, keep = s(event); !keep {
			return nil, false
		}
	}
	return event, true
}

// compilePipeline compiles the stages after $changeStream.
func compilePipeline(stages []bson.Raw) (pipeline, error) {
	var p pipeline
	for _, st := range stages {
		elems, err := st.Elements()
		if err != nil || len(elems) != 1 {
			return nil, newCommandError(codeFailedToParse, "a pipeline stage must be a document with one field, not %v", st)
		}
		name, arg := elems[0].Key(), elems[0].Value()
		doc, ok := arg.DocumentOK()
		if !ok && (name == "$match" || name == "$project") {
			return nil, newCommandError(codeFailedToParse, "the %s stage takes a document", name)
		}
		switch name {
		case "$match":
			m, err := compileMatch(doc)
			if err != nil {
				return nil, err
			}
			p = append(p, func(event bson.Raw) (bson.Raw, bool) { return event, m(event) })
		case "$project":
			proj, err := compileProject(doc)
			if err != nil {
				return nil, err
			}
			p = append(p, func(event bson.Raw) (bson.Raw, bool) { return proj.apply(event), true })
		case "$changeStream":
			return nil, newCommandError(codeBadValue, "$changeStream is only valid as the first stage in a pipeline")
		default:
			return nil, newCommandError(codeNotImplemented,
				"the development server's change streams do not support the %s stage (they support $match and $project)", name)
		}
	}
	return p, nil
}

// projection is a $project of fields kept (inclusion) or dropped (exclusion), by dotted paths.
type projection struct {
	include bool
	paths   pathTree
}

// pathTree holds dotted paths: a nil subtree marks the end of a path.
type pathTree map[string]pathTree

func compileProject(spec bson.Raw) (*projection, error) {
	elems, _ := spec.Elements()
	if len(elems) == 0 {
		return nil, newCommandError(codeBadValue, "$project needs at least one field")
	}
	p := &projection{paths: pathTree{}}
	mode := 0 // 1 inclusion, -1 exclusion
	for _, e := range elems {
		v := e.Value()
		if v.Type != bson.TypeBoolean && !v.IsNumber() {
			return nil, newCommandError(codeNotImplemented,
				"the development server's change streams support only $project of fields to 1 or 0, not %s: %s", e.Key(), v)
		}
		keep := truthy(v)
		if e.Key() == "_id" {
			if !keep {
				return nil, newCommandError(codeChangeStreamFatal, "a change stream must not drop the _id field: it holds the resume token")
			}
			continue
		}
		m := -1
		if keep {
			m = 1
		}
		if mode != 0 && mode != m {
			return nil, newCommandError(codeBadValue, "$project cannot mix inclusion and exclusion (field %s)", e.Key())
		}
		mode = m
		p.paths.add(strings.Split(e.Key(), "."))
	}
	p.include = mode >= 0
	if p.include {
		p.paths["_id"] = nil
	}
	return p, nil
}

func (t pathTree) add(path []string) {
	sub, seen := t[path[0]]
	if len(path) == 1 {
		t[path[0]] = nil
		return
	}
	if seen && sub == nil {
		return // the whole field is already named
	}
	if sub == nil {
		sub = pathTree{}
		t[path[0]] = sub
	}
	sub.add(path[1:])
}

func (p *projection) apply(doc bson.Raw) bson.Raw {
	return mustMarshal(p.project(doc, p.paths))
}

func (p *projection) project(doc bson.Raw, paths pathTree) bson.D {
	out := bson.D{}
	elems, _ := doc.Elements()
	for _, e := range elems {
		sub, named := paths[e.Key()]
		v := e.Value()
		switch {
		case named && sub == nil:
			if !p.include {
				continue
			}
			out = append(out, bson.E{Key: e.Key(), Value: v})
		case named:
			if d, ok := v.DocumentOK(); ok {
				out = append(out, bson.E{Key: e.Key(), Value: p.project(d, sub)})
			} else if arr, ok := v.ArrayOK(); ok {
				out = append(out, bson.E{Key: e.Key(), Value: p.projectArray(arr, sub)})
			} else if !p.include {
				out = append(out, bson.E{Key: e.Key(), Value: v})
			}
		case !p.include:
			out = append(out, bson.E{Key: e.Key(), Value: v})
		}
	}
	return out
}

// projectArray projects the documents of an array; with inclusion, its other values go.
func (p *projection) projectArray(arr bson.RawArray, paths pathTree) bson.A {
	values, _ := arr.Values()
	out := bson.A{}
	for _, v := range values {
		if d, ok := v.DocumentOK(); ok {
			out = append(out, p.project(d, paths))
		} else if !p.include {
			out = append(out, v)
		}
	}
	return out
}
