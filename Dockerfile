# dbcluster-operator image: build with the locked dependencies, run as non-root on distroless.
#   docker build -t dbcluster-operator:dev .
# Latest stable Rust 1.x: the locked dependencies may need more than the crate's rust-version.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin dbcluster-operator \
 && cp target/release/dbcluster-operator /usr/local/bin/dbcluster-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/dbcluster-operator /usr/local/bin/dbcluster-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/dbcluster-operator", "run"]
