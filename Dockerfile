# The image the Helm chart runs (ghcr.io/mom-router/mom-router:<version>): mom-router alone, as
# a non-root user. Model files and, for ONNX Runtime encoders, libonnxruntime.so come from the
# chart's model volume (set ORT_DYLIB_PATH or the config's runtimeLibrary to its path there).
#
#   docker build -t ghcr.io/mom-router/mom-router:0.1.0 .
#
# Not built by CI (the CI machines have no container runtime); `cargo build --release` is.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin mom-router

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/mom-router /usr/local/bin/mom-router
USER 65532:65532
EXPOSE 50051 9190
ENTRYPOINT ["/usr/local/bin/mom-router"]
CMD ["serve", "--config", "/etc/mom-router/config.yaml"]
