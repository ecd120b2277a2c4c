// Command protogen generates the Go code of the driver contract (package driverpb) from the
// project's .proto files, with no protoc installed: the files are compiled by protocompile and
// handed to the protoc-gen-go and protoc-gen-go-grpc plugins pinned as tools in go.mod.
//
// Usage (from provider-go/): go run ./internal/protogen [-check]
//
// With -check nothing is written: it fails when the committed code differs from what the
// .proto files give, so make lint catches a contract change without regenerated Go code.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

const (
	modulePath = "github.com/mcm-rs/machine-controller-manager/provider-go"
	protoFile  = "mcm/driver/v1/driver.proto"
	goPackage  = modulePath + "/driverpb;driverpb"
)

var plugins = []string{"protoc-gen-go", "protoc-gen-go-grpc"}

func main() {
	check := flag.Bool("check", false, "compare with the committed code instead of writing it")
	protoDir := flag.String("proto-dir", "../provider-proto/proto", "root of the .proto files")
	outDir := flag.String("out", ".", "root of the Go module to write into")
	flag.Parse()
	if err := run(*protoDir, *outDir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func run(protoDir, outDir string, check bool) error {
	request, err := generatorRequest(protoDir)
	if err != nil {
		return err
	}
	var stale []string
	for _, plugin := range plugins {
		files, err := runPlugin(plugin, request)
		if err != nil {
			return err
		}
		for _, file := range files {
			path := filepath.Join(outDir, filepath.FromSlash(file.GetName()))
			content := []byte(file.GetContent())
			if check {
				current, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(current, content) {
					stale = append(stale, path)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, content, 0o644); err != nil {
				return err
			}
			fmt.Println("protogen: wrote", path)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("generated code is out of date with %s: %v (run `go run ./internal/protogen` in provider-go)", protoFile, stale)
	}
	return nil
}

// generatorRequest compiles the contract and builds the request a protoc plugin reads.
func generatorRequest(protoDir string) (*pluginpb.CodeGeneratorRequest, error) {
	compiler := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{protoDir}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := compiler.Compile(context.Background(), protoFile)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", protoFile, err)
	}
	if len(files) != 1 {
		return nil, fmt.Errorf("compile %s: expected one file, got %d", protoFile, len(files))
	}
	descriptor := protodesc.ToFileDescriptorProto(files[0])
	if descriptor.GetDependency() != nil {
		return nil, errors.New("the contract gained imports: teach protogen to pass them to the plugins")
	}
	// The contract is language-neutral and has no go_package option: the import path is given
	// the way protoc users give it, as an M option.
	parameter := "module=" + modulePath + ",M" + protoFile + "=" + goPackage
	return &pluginpb.CodeGeneratorRequest{
		FileToGenerate: []string{protoFile},
		Parameter:      proto.String(parameter),
		ProtoFile:      []*descriptorpb.FileDescriptorProto{descriptor},
	}, nil
}

// runPlugin runs one plugin with `go tool` (so the version pinned in go.mod is used).
func runPlugin(plugin string, request *pluginpb.CodeGeneratorRequest) ([]*pluginpb.CodeGeneratorResponse_File, error) {
	input, err := proto.Marshal(request)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "tool", plugin)
	cmd.Stdin = bytes.NewReader(input)
	cmd.Stderr = os.Stderr
	output, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", plugin, err)
	}
	var response pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(output, &response); err != nil {
		return nil, fmt.Errorf("read %s's answer: %w", plugin, err)
	}
	if response.Error != nil {
		return nil, fmt.Errorf("%s: %s", plugin, response.GetError())
	}
	return response.GetFile(), nil
}
