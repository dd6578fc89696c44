package deploy

// The Terraform checked against the Google provider's own schema, offline: terraform
// validate needs the provider binary, which cannot be downloaded here. The npm package
// @cdktf/provider-google is generated from that schema and ships it in its .jsii
// manifest: every resource and data source, its arguments and nested blocks, and which
// are required. deploy/tools.sh fetches the package (cached); TestProviderSchemaExtract
// extracts the types the tree uses and compares them with the committed extract in
// testdata/ (-update rewrites it), and TestProviderSchema checks every block of every
// .tf file against that extract, so the check itself needs neither npm nor a network.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The provider version the check covers and the package that carries its schema. Keep
// them in step with deploy/tools.sh and the required_providers constraints.
const (
	GoogleProviderVersion = "6.50.0"
	CDKTFGooglePackage    = "@cdktf/provider-google"
	CDKTFGoogleVersion    = "16.12.1"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite testdata's provider schema extract from the cdktf package's .jsii")

// schemaExtractPath is the committed extract.
var schemaExtractPath = filepath.Join("testdata", "google-provider-"+GoogleProviderVersion+".schema.json")

// providerSchema is the part of the provider's schema the tree uses.
type providerSchema struct {
	Provider    string                  `json:"provider"`
	Version     string                  `json:"version"`
	Package     string                  `json:"package"`
	Config      *schemaBlock            `json:"provider_config"`
	Resources   map[string]*schemaBlock `json:"resources"`
	DataSources map[string]*schemaBlock `json:"data_sources"`
}

// schemaBlock is one block's arguments and nested blocks, by Terraform name.
type schemaBlock struct {
	Attributes map[string]schemaAttr    `json:"attributes"`
	Blocks     map[string]*schemaNested `json:"blocks,omitempty"`
}

type schemaAttr struct {
	Required bool `json:"required,omitempty"`
}

type schemaNested struct {
	Required bool         `json:"required,omitempty"`
	List     bool         `json:"list,omitempty"` // may repeat; otherwise at most one
	Block    *schemaBlock `json:"block"`
}

// --- the check -------------------------------------------------------------------------

func loadSchemaExtract() (*providerSchema, error) {
	b, err := os.ReadFile(schemaExtractPath)
	if err != nil {
		return nil, fmt.Errorf("provider schema extract: %w (regenerate: deploy/tools.sh, then go test ./deploy -run TestProviderSchemaExtract -update-schema)", err)
	}
	var s providerSchema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("provider schema extract %s: %w", schemaExtractPath, err)
	}
	return &s, nil
}

// tfFiles returns every .tf file under root, sorted.
func tfFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".terraform" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".tf") {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// topBlocks parses every .tf file under root and calls fn with each top-level block.
func topBlocks(root string, fn func(file string, b *hclsyntax.Block)) error {
	files, err := tfFiles(root)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no .tf files under %s", root)
	}
	p := hclparse.NewParser()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		file, diags := p.ParseHCL(src, f)
		if diags.HasErrors() {
			return fmt.Errorf("parse: %s", diags.Error())
		}
		rel, _ := filepath.Rel(root, f)
		for _, b := range file.Body.(*hclsyntax.Body).Blocks {
			fn(rel, b)
		}
	}
	return nil
}

// usedTypes returns the resource and data source types the tree declares.
func usedTypes(root string) (resources, dataSources []string, err error) {
	err = topBlocks(root, func(_ string, b *hclsyntax.Block) {
		switch {
		case b.Type == "resource" && len(b.Labels) == 2:
			resources = append(resources, b.Labels[0])
		case b.Type == "data" && len(b.Labels) == 2:
			dataSources = append(dataSources, b.Labels[0])
		}
	})
	slices.Sort(resources)
	slices.Sort(dataSources)
	return slices.Compact(resources), slices.Compact(dataSources), err
}

// checkProviderSchema checks every google resource, data source and provider block
// under root against s, and every required_providers constraint for google against
// s.Version.
func checkProviderSchema(root string, s *providerSchema) []error {
	var errs []error
	err := topBlocks(root, func(file string, b *hclsyntax.Block) {
		where := fmt.Sprintf("%s:%d", file, b.TypeRange.Start.Line)
		switch b.Type {
		case "resource", "data":
			if len(b.Labels) != 2 || !strings.HasPrefix(b.Labels[0], "google_") {
				return
			}
			kinds, kind := s.Resources, "resource"
			if b.Type == "data" {
				kinds, kind = s.DataSources, "data source"
			}
			sb, ok := kinds[b.Labels[0]]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: %s %s is not in the google provider %s's schema extract (a misspelt type, or regenerate the extract: go test ./deploy -run TestProviderSchemaExtract -update-schema)", where, kind, b.Labels[0], s.Version))
				return
			}
			errs = append(errs, checkBody(where+" "+b.Type+"."+strings.Join(b.Labels, "."), b.Body, sb, true)...)
		case "provider":
			if len(b.Labels) == 1 && b.Labels[0] == "google" && s.Config != nil {
				errs = append(errs, checkBody(where+" provider.google", b.Body, s.Config, false)...)
			}
		case "terraform":
			errs = append(errs, checkConstraint(where, b.Body, s.Version)...)
		}
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

// The meta-arguments Terraform itself takes in resources and data sources.
var (
	metaAttrs  = []string{"count", "for_each", "depends_on", "provider"}
	metaBlocks = []string{"lifecycle", "provisioner", "connection"}
)

// checkBody checks one block's body against its schema: no unknown argument or block,
// no argument written as a block or a block as an argument, every required one set.
// A required block given by a dynamic block counts as set; a dynamic block's content is
// checked against its block's schema.
func checkBody(where string, body *hclsyntax.Body, sb *schemaBlock, top bool) []error {
	var errs []error
	names := func() string {
		var n []string
		for k := range sb.Attributes {
			n = append(n, k)
		}
		for k := range sb.Blocks {
			n = append(n, k+" {}")
		}
		sort.Strings(n)
		return strings.Join(n, ", ")
	}
	for name, a := range body.Attributes {
		if top && slices.Contains(metaAttrs, name) {
			continue
		}
		if _, ok := sb.Attributes[name]; ok {
			continue
		}
		at := fmt.Sprintf("%s: %s (line %d)", where, name, a.SrcRange.Start.Line)
		if _, ok := sb.Blocks[name]; ok {
			errs = append(errs, fmt.Errorf("%s is a block, written as an argument: write %s { … }", at, name))
			continue
		}
		errs = append(errs, fmt.Errorf("%s: no such argument (the schema has: %s)", at, names()))
	}
	static, dynamic := map[string]int{}, map[string]bool{}
	for _, blk := range body.Blocks {
		name, content := blk.Type, blk.Body
		if top && slices.Contains(metaBlocks, name) {
			continue
		}
		if name == "dynamic" {
			if len(blk.Labels) != 1 {
				errs = append(errs, fmt.Errorf("%s: dynamic block (line %d) without one label", where, blk.TypeRange.Start.Line))
				continue
			}
			name = blk.Labels[0]
			content = nil
			for _, c := range blk.Body.Blocks {
				if c.Type == "content" {
					content = c.Body
				}
			}
			if content == nil {
				errs = append(errs, fmt.Errorf("%s: dynamic %q (line %d) has no content block", where, name, blk.TypeRange.Start.Line))
				continue
			}
			dynamic[name] = true
		} else {
			static[name]++
		}
		at := fmt.Sprintf("%s: %s (line %d)", where, name, blk.TypeRange.Start.Line)
		nb, ok := sb.Blocks[name]
		if !ok {
			if _, isAttr := sb.Attributes[name]; isAttr {
				errs = append(errs, fmt.Errorf("%s is an argument, written as a block: write %s = …", at, name))
				continue
			}
			errs = append(errs, fmt.Errorf("%s: no such block (the schema has: %s)", at, names()))
			continue
		}
		errs = append(errs, checkBody(where+"."+name, content, nb.Block, false)...)
	}
	for name, nb := range sb.Blocks {
		if !nb.List && static[name] > 1 {
			errs = append(errs, fmt.Errorf("%s: %s { … } may appear at most once", where, name))
		}
		if nb.Required && static[name] == 0 && !dynamic[name] {
			errs = append(errs, fmt.Errorf("%s: the required block %s { … } is missing", where, name))
		}
	}
	for name, a := range sb.Attributes {
		if a.Required && body.Attributes[name] == nil {
			errs = append(errs, fmt.Errorf("%s: the required argument %s is missing", where, name))
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// checkConstraint checks a terraform block's required_providers.google.version: it must
// admit version and no other minor release (the range the schema check covers).
func checkConstraint(where string, body *hclsyntax.Body, version string) []error {
	var errs []error
	for _, rp := range blocks(body, "required_providers") {
		a, ok := rp.Attributes["google"]
		if !ok {
			continue
		}
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() || !v.Type().IsObjectType() || !v.Type().HasAttribute("version") {
			errs = append(errs, fmt.Errorf("%s: required_providers.google has no literal version constraint", where))
			continue
		}
		cv := v.GetAttr("version")
		if cv.Type() != cty.String || cv.IsNull() {
			errs = append(errs, fmt.Errorf("%s: required_providers.google.version is not a string", where))
			continue
		}
		c := cv.AsString()
		ok, err := admits(c, version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%s: the google provider constraint %q does not admit %s, the version the schema check covers", where, c, version))
			continue
		}
		maj, min, _, _ := splitVersion(version)
		for _, other := range []string{
			fmt.Sprintf("%d.%d.0", maj, min+1), fmt.Sprintf("%d.%d.999", maj, min-1), fmt.Sprintf("%d.0.0", maj+1),
		} {
			if ok, _ := admits(c, other); ok {
				errs = append(errs, fmt.Errorf("%s: the google provider constraint %q admits %s, which the schema check (%s) does not cover: pin it, e.g. \"~> %d.%d.0\"", where, c, other, version, maj, min))
				break
			}
		}
	}
	return errs
}

// splitVersion parses MAJOR.MINOR.PATCH (a missing part is 0).
func splitVersion(v string) (maj, min, patch int, err error) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	if len(parts) == 0 || len(parts) > 3 {
		return 0, 0, 0, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", v)
	}
	var n [3]int
	for i, p := range parts {
		if n[i], err = strconv.Atoi(p); err != nil || n[i] < 0 {
			return 0, 0, 0, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", v)
		}
	}
	return n[0], n[1], n[2], nil
}

func cmpVersion(a, b [3]int) int { return slices.Compare(a[:], b[:]) }

var constraintRe = regexp.MustCompile(`^\s*(~>|>=|<=|!=|=|>|<)?\s*([0-9][0-9.]*)\s*$`)

// admits reports whether Terraform's version constraint c (comma-separated
// conditions: = != > >= < <= ~>) admits version v.
func admits(c, v string) (bool, error) {
	maj, min, patch, err := splitVersion(v)
	if err != nil {
		return false, err
	}
	have := [3]int{maj, min, patch}
	for _, cond := range strings.Split(c, ",") {
		m := constraintRe.FindStringSubmatch(cond)
		if m == nil {
			return false, fmt.Errorf("version constraint %q: cannot read %q", c, cond)
		}
		a, b, p, err := splitVersion(m[2])
		if err != nil {
			return false, fmt.Errorf("version constraint %q: %w", c, err)
		}
		want := [3]int{a, b, p}
		d := cmpVersion(have, want)
		var ok bool
		switch m[1] {
		case "", "=":
			ok = d == 0
		case "!=":
			ok = d != 0
		case ">":
			ok = d > 0
		case ">=":
			ok = d >= 0
		case "<":
			ok = d < 0
		case "<=":
			ok = d <= 0
		case "~>":
			// ~> 6.50.0 admits 6.50.x; ~> 6.50 admits 6.x from 6.50 on.
			ok = d >= 0 && have[0] == want[0]
			if len(strings.Split(m[2], ".")) == 3 {
				ok = ok && have[1] == want[1]
			}
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

func TestProviderSchema(t *testing.T) {
	s, err := loadSchemaExtract()
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != GoogleProviderVersion {
		t.Fatalf("%s is for provider %s, the check covers %s: regenerate it", schemaExtractPath, s.Version, GoogleProviderVersion)
	}
	for _, err := range checkProviderSchema(tfDir(), s) {
		t.Error(err)
	}
}

// --- the extract from the cdktf package ------------------------------------------------

// jsiiPath is where deploy/tools.sh leaves the package's .jsii manifest (or
// RUNONCE_PROVIDER_JSII).
func jsiiPath() string {
	if p := os.Getenv("RUNONCE_PROVIDER_JSII"); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "runonce", "cdktf-provider-google-"+CDKTFGoogleVersion+".jsii")
}

type jsiiAssembly struct {
	Name    string              `json:"name"`
	Version string              `json:"version"`
	Types   map[string]jsiiType `json:"types"`
}

type jsiiType struct {
	Kind        string         `json:"kind"`
	Datatype    bool           `json:"datatype"`
	Docs        jsiiDocs       `json:"docs"`
	Properties  []jsiiProperty `json:"properties"`
	Initializer *struct {
		Parameters []struct {
			Name string          `json:"name"`
			Type json.RawMessage `json:"type"`
		} `json:"parameters"`
	} `json:"initializer"`
}

type jsiiDocs struct {
	Summary string `json:"summary"`
	Remarks string `json:"remarks"`
}

type jsiiProperty struct {
	Name     string          `json:"name"`
	Optional bool            `json:"optional"`
	Docs     jsiiDocs        `json:"docs"`
	Type     json.RawMessage `json:"type"`
}

var (
	// "Represents a {@link https://registry.terraform.io/providers/hashicorp/google/6.50.0/docs/resources/cloud_run_v2_service google_cloud_run_v2_service}."
	representsRe = regexp.MustCompile(`^Represents a \{@link https://registry\.terraform\.io/providers/hashicorp/google/([0-9.]+)/docs(?:/(resources|data-sources)/\S+)? (google\w*)\}`)
	// "… {@link https://…/cloud_run_v2_service#template CloudRunV2Service#template}": the
	// property's Terraform name.
	anchorRe = regexp.MustCompile(`#([a-z0-9_]+) [A-Za-z0-9]+#[a-z0-9_]+\}`)
	fqnRe    = regexp.MustCompile(`"fqn":\s*"(@cdktf/provider-google\.[^"]+)"`)
	arrayRe  = regexp.MustCompile(`"kind":\s*"array"`)
)

// extractSchema reads the cdktf package's .jsii manifest and returns the schema of the
// provider configuration and of the named resources and data sources.
func extractSchema(path string, resources, dataSources []string) (*providerSchema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var asm jsiiAssembly
	if err := json.Unmarshal(b, &asm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if asm.Name != CDKTFGooglePackage || asm.Version != CDKTFGoogleVersion {
		return nil, fmt.Errorf("%s is %s@%s, want %s@%s", path, asm.Name, asm.Version, CDKTFGooglePackage, CDKTFGoogleVersion)
	}
	s := &providerSchema{
		Provider: "registry.terraform.io/hashicorp/google", Package: CDKTFGooglePackage + "@" + CDKTFGoogleVersion,
		Resources: map[string]*schemaBlock{}, DataSources: map[string]*schemaBlock{},
	}
	classes := map[string]string{} // "resources/google_x", "data-sources/google_x", "provider" → config fqn
	for _, ty := range asm.Types {
		m := representsRe.FindStringSubmatch(ty.Docs.Summary)
		if m == nil || ty.Kind != "class" || ty.Initializer == nil {
			continue
		}
		if s.Version == "" {
			s.Version = m[1]
		} else if s.Version != m[1] {
			return nil, fmt.Errorf("%s documents provider versions %s and %s", path, s.Version, m[1])
		}
		key := "provider"
		if m[2] != "" {
			key = m[2] + "/" + m[3]
		}
		for _, p := range ty.Initializer.Parameters {
			if p.Name == "config" {
				if f := fqnRe.FindSubmatch(p.Type); f != nil {
					classes[key] = string(f[1])
				}
			}
		}
	}
	block := func(fqn string) (*schemaBlock, error) { return jsiiBlock(asm.Types, fqn, 0) }
	if fqn, ok := classes["provider"]; ok {
		if s.Config, err = block(fqn); err != nil {
			return nil, err
		}
	}
	for _, kind := range []struct {
		names []string
		dir   string
		into  map[string]*schemaBlock
	}{{resources, "resources", s.Resources}, {dataSources, "data-sources", s.DataSources}} {
		for _, name := range kind.names {
			fqn, ok := classes[kind.dir+"/"+name]
			if !ok {
				return nil, fmt.Errorf("%s: the google provider %s has no %s %s", path, s.Version, strings.TrimSuffix(kind.dir, "s"), name)
			}
			if kind.into[name], err = block(fqn); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// jsiiBlock turns a config struct into a block schema: a property whose type is
// another of the package's structs and whose summary says "… block." is a nested
// block (an array of them may repeat); every other property is an argument.
func jsiiBlock(types map[string]jsiiType, fqn string, depth int) (*schemaBlock, error) {
	if depth > 16 {
		return nil, fmt.Errorf("%s: nested deeper than 16 blocks", fqn)
	}
	ty, ok := types[fqn]
	if !ok || !ty.Datatype {
		return nil, fmt.Errorf("%s: not a struct in the manifest", fqn)
	}
	sb := &schemaBlock{Attributes: map[string]schemaAttr{}}
	for _, p := range ty.Properties {
		// The docs link names the Terraform name; a few docs are mangled, and then
		// the name is the property's, snake_cased back (cdktf camelCases it).
		name := camelToSnake(p.Name)
		if m := anchorRe.FindStringSubmatch(p.Docs.Remarks + " " + p.Docs.Summary); m != nil {
			name = m[1]
		}
		f := fqnRe.FindSubmatch(p.Type)
		if f != nil && strings.HasSuffix(p.Docs.Summary, " block.") {
			nb, err := jsiiBlock(types, string(f[1]), depth+1)
			if err != nil {
				return nil, err
			}
			if sb.Blocks == nil {
				sb.Blocks = map[string]*schemaNested{}
			}
			sb.Blocks[name] = &schemaNested{Required: !p.Optional, List: arrayRe.Match(p.Type), Block: nb}
			continue
		}
		sb.Attributes[name] = schemaAttr{Required: !p.Optional}
	}
	return sb, nil
}

func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestProviderSchemaExtract extracts the schema of the types the tree uses from the
// cdktf package and compares it with the committed extract (-update-schema rewrites
// it). Without the package it skips, except in CI.
func TestProviderSchemaExtract(t *testing.T) {
	p := jsiiPath()
	if _, err := os.Stat(p); err != nil {
		if inCI() {
			t.Fatalf("the provider schema (%s@%s) is missing at %s (CI=true): run deploy/tools.sh", CDKTFGooglePackage, CDKTFGoogleVersion, p)
		}
		t.Skipf("the provider schema is missing at %s: run deploy/tools.sh (CI fails here)", p)
	}
	res, data, err := usedTypes(tfDir())
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := extractSchema(p, res, data)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Version != GoogleProviderVersion {
		t.Fatalf("%s@%s carries provider %s, the check says %s", CDKTFGooglePackage, CDKTFGoogleVersion, fresh.Version, GoogleProviderVersion)
	}
	want, err := json.MarshalIndent(fresh, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *updateSchema {
		if err := os.WriteFile(schemaExtractPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d resource types, %d data sources)", schemaExtractPath, len(res), len(data))
		return
	}
	have, err := os.ReadFile(schemaExtractPath)
	if err != nil {
		t.Fatalf("%v: go test ./deploy -run TestProviderSchemaExtract -update-schema", err)
	}
	if string(have) != string(want) {
		t.Fatalf("%s differs from the schema of %s@%s for the types the tree uses: go test ./deploy -run TestProviderSchemaExtract -update-schema", schemaExtractPath, CDKTFGooglePackage, CDKTFGoogleVersion)
	}
}

// The versions here, in deploy/tools.sh and in every required_providers are the same.
func TestProviderSchemaVersionsAgree(t *testing.T) {
	b, err := os.ReadFile("tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	if want := "CDKTF_GOOGLE_VERSION=" + CDKTFGoogleVersion; !strings.Contains(string(b), want) {
		t.Errorf("deploy/tools.sh does not set %s", want)
	}
}

// schemaBreakages are mistakes only the provider's schema catches.
var schemaBreakages = []breakage{
	{"misspelt cpu_idle", "", "modules/runonce/run.tf", "        cpu_idle          = false", "        cpu_idel          = false"},
	{"misspelt ack_deadline_seconds", "", "modules/runonce/pubsub.tf", "ack_deadline_seconds", "ack_deadline_second"},
	{"an argument written as a block", "", "modules/runonce/pubsub.tf", "  retry_policy {", "  labels {}\n  retry_policy {"},
	{"a block written as an argument", "", "modules/runonce/firestore.tf", "  ttl_config {}\n", "  ttl_config = {}\n"},
	{"a block in the wrong place", "", "modules/runonce/run.tf", "        cpu_idle          = false", "        cpu_idle          = false\n        scaling {}"},
	{"an unknown resource type", "", "modules/runonce/pubsub.tf", `resource "google_pubsub_topic" "runs"`, `resource "google_pubsub_topics" "runs"`},
	{"a missing required argument", "", "modules/runonce/iam.tf", "  role    = \"roles/datastore.user\"\n", ""},
	{"a misspelt argument in a dynamic block's content", "", "modules/runonce/run.tf", "          value = env.value", "          valeu = env.value"},
	{"a provider constraint the check does not cover", "", "modules/runonce/versions.tf", `version = "~> ` + GoogleProviderVersion[:strings.LastIndex(GoogleProviderVersion, ".")] + `.0"`, `version = "~> 6.0"`},
	{"a provider constraint that excludes the checked version", "", "examples/basic/versions.tf", `version = "~> ` + GoogleProviderVersion[:strings.LastIndex(GoogleProviderVersion, ".")] + `.0"`, `version = "~> 5.40.0"`},
	{"a misspelt provider argument", "", "examples/basic/main.tf", "  project = var.project_id", "  projects = var.project_id"},
	{"a missing required block", "", "modules/runonce/run.tf", "  replication {\n    auto {}\n  }\n", ""},
	{"a single block repeated", "", "modules/runonce/run.tf", "  replication {\n    auto {}\n  }\n", "  replication {\n    auto {}\n  }\n  replication {\n    auto {}\n  }\n"},
}

// TestProviderSchemaCatchesBreakage breaks a copy of the tree one way at a time and
// expects the schema check to report it (and to pass on the unbroken copy).
func TestProviderSchemaCatchesBreakage(t *testing.T) {
	s, err := loadSchemaExtract()
	if err != nil {
		t.Fatal(err)
	}
	src := tfDir()
	if errs := checkProviderSchema(copyTree(t, src), s); len(errs) > 0 {
		t.Fatalf("the schema check fails on the unbroken tree: %v", errors.Join(errs...))
	}
	for _, b := range schemaBreakages {
		t.Run(strings.ReplaceAll(b.name, " ", "_"), func(t *testing.T) {
			dir := copyTree(t, src)
			p := filepath.Join(dir, b.file)
			text, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(text), b.old) {
				t.Fatalf("%s no longer contains %q: update this breakage", b.file, b.old)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(text), b.old, b.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			errs := checkProviderSchema(dir, s)
			if len(errs) == 0 {
				t.Fatalf("the schema check did not catch: %s", b.name)
			}
			t.Logf("caught %q: %v", b.name, errs[0])
		})
	}
}

func TestVersionConstraint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		c, v string
		ok   bool
	}{
		{"~> 6.50.0", "6.50.0", true}, {"~> 6.50.0", "6.50.3", true}, {"~> 6.50.0", "6.51.0", false},
		{"~> 6.0", "6.50.0", true}, {"~> 6.0", "7.0.0", false}, {"~> 6.50", "6.49.0", false},
		{">= 6.50.0, < 6.51.0", "6.50.9", true}, {">= 6.50.0, < 6.51.0", "6.51.0", false},
		{"6.50.0", "6.50.0", true}, {"!= 6.50.0", "6.50.0", false},
	} {
		if ok, err := admits(c.c, c.v); err != nil || ok != c.ok {
			t.Errorf("admits(%q, %q) = %v, %v; want %v", c.c, c.v, ok, err, c.ok)
		}
	}
	if _, err := admits("~> six", "6.0.0"); err == nil {
		t.Error("admits read a constraint that is not one")
	}
}
