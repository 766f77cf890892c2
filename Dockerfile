# dbcluster-operator image: the operator alone (no simulator: `--no-default-features`), with jemalloc
# as its allocator (`--features jemalloc`), built with the locked dependencies and the `dist`
# profile (optimised across crates: see Cargo.toml), run as non-root on distroless.
#   docker build -t dbcluster-operator:dev .
# Base images are pinned by tag; Rust is newer than the crate's rust-version because the locked
# dependencies may need more.
FROM rust:1.95-bookworm AS build
WORKDIR /src

# The dependencies first, in their own layer, cached until Cargo.toml or Cargo.lock change: a
# stub crate with the same manifest (the declared benches need a file each).
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && for bench in workqueue cache e2e; do echo 'fn main() {}' > "benches/$bench.rs"; done \
 && cargo build --profile dist --locked --no-default-features --features jemalloc --bin dbcluster-operator \
 && rm -rf src benches

# Then the sources; `touch` makes cargo rebuild the crate over the stub whatever the copied mtimes.
COPY src src
COPY manifests manifests
COPY benches benches
RUN touch src/main.rs src/lib.rs \
 && cargo build --profile dist --locked --no-default-features --features jemalloc --bin dbcluster-operator \
 && cp target/dist/dbcluster-operator /usr/local/bin/dbcluster-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/dbcluster-operator /usr/local/bin/dbcluster-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/dbcluster-operator", "run"]
