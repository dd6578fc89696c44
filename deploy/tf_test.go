package deploy

// A small reader of Terraform configurations: it parses every .tf file of a directory
// with hashicorp/hcl/v2, keeps its variables, locals, resources and module calls, and
// evaluates the expressions the checks need with the variables' defaults (or a module
// call's arguments). Anything it cannot know (a resource's attribute, a function it
// does not have) evaluates to unknown, which the checks treat as a failure where a
// value is required.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// tfModule is one directory of .tf files.
type tfModule struct {
	dir       string
	vars      map[string]*hclsyntax.Block
	locals    map[string]hclsyntax.Expression
	resources []*tfBlock
	calls     []*tfBlock // module blocks
	ctx       *hcl.EvalContext
}

// tfBlock is a resource (labels: type, name) or a module call (labels: name).
type tfBlock struct {
	file   string
	labels []string
	body   *hclsyntax.Body
}

func (b *tfBlock) typ() string  { return b.labels[0] }
func (b *tfBlock) name() string { return b.labels[len(b.labels)-1] }
func (b *tfBlock) String() string {
	return fmt.Sprintf("%s (%s)", strings.Join(b.labels, "."), b.file)
}

// loadModule parses dir's .tf files. overrides replace variables' defaults (a module
// call's arguments); a variable with neither is unknown.
func loadModule(dir string, overrides map[string]cty.Value) (*tfModule, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .tf files in %s", dir)
	}
	sort.Strings(files)
	m := &tfModule{dir: dir, vars: map[string]*hclsyntax.Block{}, locals: map[string]hclsyntax.Expression{}}
	p := hclparse.NewParser()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		file, diags := p.ParseHCL(src, f)
		if diags.HasErrors() {
			return nil, fmt.Errorf("parse: %s", diags.Error())
		}
		body := file.Body.(*hclsyntax.Body)
		for _, b := range body.Blocks {
			switch b.Type {
			case "variable":
				m.vars[b.Labels[0]] = b
			case "locals":
				for name, a := range b.Body.Attributes {
					m.locals[name] = a.Expr
				}
			case "resource":
				m.resources = append(m.resources, &tfBlock{file: filepath.Base(f), labels: b.Labels, body: b.Body})
			case "module":
				m.calls = append(m.calls, &tfBlock{file: filepath.Base(f), labels: b.Labels, body: b.Body})
			}
		}
	}
	m.ctx = m.evalContext(overrides)
	return m, nil
}

func (m *tfModule) evalContext(overrides map[string]cty.Value) *hcl.EvalContext {
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{}, Functions: tfFunctions()}
	for _, r := range m.resources {
		ctx.Variables[r.typ()] = cty.DynamicVal
	}
	for _, name := range []string{"data", "module", "each", "count", "path", "terraform", "self"} {
		ctx.Variables[name] = cty.DynamicVal
	}
	vars := map[string]cty.Value{}
	for name, b := range m.vars {
		vars[name] = cty.DynamicVal
		// A required string (a project ID, an image) stands for itself, so that values
		// built from it (resource names in a jobs file) are known.
		if t, ok := b.Body.Attributes["type"]; ok && hcl.ExprAsKeyword(t.Expr) == "string" {
			vars[name] = cty.StringVal("VAR_" + name)
		}
		if a, ok := b.Body.Attributes["default"]; ok {
			if v, diags := a.Expr.Value(nil); !diags.HasErrors() {
				vars[name] = v
			}
		}
		if v, ok := overrides[name]; ok {
			vars[name] = v
		}
	}
	ctx.Variables["var"] = cty.ObjectVal(vars)
	// Locals may use each other: evaluate in rounds until nothing changes.
	locals := map[string]cty.Value{}
	for name := range m.locals {
		locals[name] = cty.DynamicVal
	}
	for range len(m.locals) + 1 {
		ctx.Variables["local"] = cty.ObjectVal(locals)
		changed := false
		for name, expr := range m.locals {
			v, diags := expr.Value(ctx)
			if diags.HasErrors() {
				v = cty.DynamicVal
			}
			if !v.RawEquals(locals[name]) {
				locals[name], changed = v, true
			}
		}
		if !changed {
			break
		}
	}
	ctx.Variables["local"] = cty.ObjectVal(locals)
	return ctx
}

// eval evaluates expr; each, when not nil, is each.key/each.value.
func (m *tfModule) eval(expr hcl.Expression, each *cty.Value) (cty.Value, error) {
	ctx := m.ctx
	if each != nil {
		ctx = ctx.NewChild()
		ctx.Variables = map[string]cty.Value{"each": cty.ObjectVal(map[string]cty.Value{"key": *each, "value": *each})}
	}
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return cty.DynamicVal, fmt.Errorf("%s", diags.Error())
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		return v, fmt.Errorf("%s: value not known from the variables' defaults", rangeOf(expr))
	}
	return v, nil
}

func rangeOf(expr hcl.Expression) string {
	r := expr.Range()
	return fmt.Sprintf("%s:%d", filepath.Base(r.Filename), r.Start.Line)
}

// evalString evaluates an expression that must be a known string.
func (m *tfModule) evalString(expr hcl.Expression, each *cty.Value) (string, error) {
	v, err := m.eval(expr, each)
	if err != nil {
		return "", err
	}
	v, err = convert.Convert(v, cty.String)
	if err != nil || v.IsNull() {
		return "", fmt.Errorf("%s: want a string", rangeOf(expr))
	}
	return v.AsString(), nil
}

// evalNumber evaluates an expression that must be a known number.
func (m *tfModule) evalNumber(expr hcl.Expression) (float64, error) {
	v, err := m.eval(expr, nil)
	if err != nil {
		return 0, err
	}
	v, err = convert.Convert(v, cty.Number)
	if err != nil || v.IsNull() {
		return 0, fmt.Errorf("%s: want a number", rangeOf(expr))
	}
	f, _ := v.AsBigFloat().Float64()
	return f, nil
}

// resourcesOf returns the resources of type typ.
func (m *tfModule) resourcesOf(typ string) []*tfBlock {
	var out []*tfBlock
	for _, r := range m.resources {
		if r.typ() == typ {
			out = append(out, r)
		}
	}
	return out
}

// blocks returns the nested blocks at a path of block types (e.g. "template",
// "containers", "resources"), static blocks only.
func blocks(body *hclsyntax.Body, path ...string) []*hclsyntax.Body {
	cur := []*hclsyntax.Body{body}
	for _, typ := range path {
		var next []*hclsyntax.Body
		for _, b := range cur {
			for _, blk := range b.Blocks {
				if blk.Type == typ {
					next = append(next, blk.Body)
				}
			}
		}
		cur = next
	}
	return cur
}

// dynamicBlocks returns the dynamic "typ" blocks directly in body.
func dynamicBlocks(body *hclsyntax.Body, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, blk := range body.Blocks {
		if blk.Type == "dynamic" && len(blk.Labels) == 1 && blk.Labels[0] == typ {
			out = append(out, blk)
		}
	}
	return out
}

// attr returns the attribute name of body, or nil.
func attr(body *hclsyntax.Body, name string) hclsyntax.Expression {
	if a, ok := body.Attributes[name]; ok {
		return a.Expr
	}
	return nil
}

// traversalName returns "root.attr…" of a bare reference such as var.worker_image or
// google_pubsub_topic.dead_letter.id, or "".
func traversalName(expr hcl.Expression) string {
	e, ok := expr.(*hclsyntax.ScopeTraversalExpr)
	if !ok {
		return ""
	}
	var parts []string
	for _, t := range e.Traversal {
		switch t := t.(type) {
		case hcl.TraverseRoot:
			parts = append(parts, t.Name)
		case hcl.TraverseAttr:
			parts = append(parts, t.Name)
		case hcl.TraverseIndex:
			parts = append(parts, "[]")
		}
	}
	return strings.Join(parts, ".")
}

// references reports whether expr mentions the reference prefix (e.g. "var.worker_image").
func references(expr hcl.Expression, prefix string) bool {
	for _, tr := range expr.Variables() {
		var parts []string
		for _, t := range tr {
			switch t := t.(type) {
			case hcl.TraverseRoot:
				parts = append(parts, t.Name)
			case hcl.TraverseAttr:
				parts = append(parts, t.Name)
			}
		}
		if strings.HasPrefix(strings.Join(parts, "."), prefix) {
			return true
		}
	}
	return false
}

// objectKeys returns every literal key of every object constructor inside expr
// (following local.X references), e.g. the RUNONCE_* names of an env map built with
// merge() and conditionals.
func (m *tfModule) objectKeys(expr hclsyntax.Expression) []string {
	var keys []string
	seen := map[string]bool{}
	var walk func(e hclsyntax.Expression)
	walk = func(e hclsyntax.Expression) {
		hclsyntax.VisitAll(e, func(n hclsyntax.Node) hcl.Diagnostics {
			switch n := n.(type) {
			case *hclsyntax.ObjectConsExpr:
				for _, it := range n.Items {
					if k := hcl.ExprAsKeyword(it.KeyExpr); k != "" {
						keys = append(keys, k)
					} else if v, diags := it.KeyExpr.Value(nil); !diags.HasErrors() && v.Type() == cty.String {
						keys = append(keys, v.AsString())
					}
				}
			case *hclsyntax.ScopeTraversalExpr:
				name := traversalName(n)
				if local, ok := strings.CutPrefix(name, "local."); ok && !seen[local] {
					seen[local] = true
					if le, ok := m.locals[local]; ok {
						walk(le)
					}
				}
			}
			return nil
		})
	}
	walk(expr)
	return keys
}

// moduleArgs evaluates a module call's arguments in the calling module.
func (m *tfModule) moduleArgs(call *tfBlock) map[string]cty.Value {
	out := map[string]cty.Value{}
	for name, a := range call.body.Attributes {
		if name == "source" || name == "version" || name == "providers" || name == "depends_on" || name == "count" || name == "for_each" {
			continue
		}
		v, diags := a.Expr.Value(m.ctx)
		if diags.HasErrors() {
			v = cty.DynamicVal
		}
		out[name] = v
	}
	return out
}

func tfFunctions() map[string]function.Function {
	identity := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType, AllowMarked: true, AllowNull: true, AllowUnknown: true}},
		Type:   func(args []cty.Value) (cty.Type, error) { return args[0].Type(), nil },
		Impl:   func(args []cty.Value, _ cty.Type) (cty.Value, error) { return args[0], nil },
	})
	to := func(t cty.Type) function.Function {
		return function.New(&function.Spec{
			Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType, AllowNull: true}},
			Type: func(args []cty.Value) (cty.Type, error) {
				if t == cty.String || t == cty.Number || t == cty.Bool {
					return t, nil
				}
				if args[0].Type().IsTupleType() || args[0].Type().IsListType() || args[0].Type().IsSetType() {
					return cty.Set(cty.String), nil
				}
				return cty.DynamicPseudoType, nil
			},
			Impl: func(args []cty.Value, rt cty.Type) (cty.Value, error) { return convert.Convert(args[0], rt) },
		})
	}
	str := func(f func(string) string) function.Function {
		return function.New(&function.Spec{
			Params: []function.Parameter{{Name: "s", Type: cty.String}},
			Type:   function.StaticReturnType(cty.String),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				return cty.StringVal(f(args[0].AsString())), nil
			},
		})
	}
	return map[string]function.Function{
		"coalesce":     stdlib.CoalesceFunc,
		"concat":       stdlib.ConcatFunc,
		"contains":     stdlib.ContainsFunc,
		"floor":        stdlib.FloorFunc,
		"format":       stdlib.FormatFunc,
		"join":         stdlib.JoinFunc,
		"jsondecode":   stdlib.JSONDecodeFunc,
		"jsonencode":   stdlib.JSONEncodeFunc,
		"keys":         stdlib.KeysFunc,
		"length":       stdlib.LengthFunc,
		"lookup":       stdlib.LookupFunc,
		"lower":        stdlib.LowerFunc,
		"max":          stdlib.MaxFunc,
		"merge":        stdlib.MergeFunc,
		"min":          stdlib.MinFunc,
		"split":        stdlib.SplitFunc,
		"trimspace":    stdlib.TrimSpaceFunc,
		"upper":        stdlib.UpperFunc,
		"values":       stdlib.ValuesFunc,
		"nonsensitive": identity,
		"sensitive":    identity,
		"tostring":     to(cty.String),
		"tonumber":     to(cty.Number),
		"toset":        to(cty.Set(cty.String)),
		"dirname":      str(path.Dir),
		"basename":     str(path.Base),
	}
}
