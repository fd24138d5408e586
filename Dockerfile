# The example deployment (examples/deploy/app.py) as a container image:
#   docker build -t runstream-app .
#   docker run -p 4111:4111 -e RUNSTREAM_API_TOKEN=change-me runstream-app                      # API
#   docker run -e DATABASE_URL=... -e REDIS_URL=... -e TEMPORAL_ADDRESS=... runstream-app runstream worker app:api_runtime  # worker
# Replace examples/deploy/app.py with your own module (keep an `api_runtime` or change the CMD).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RUNSTREAM_SQLITE_PATH=/data/runstream.db

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN pip install '.[openai,anthropic,postgres,redis,temporal]'
COPY examples/deploy/app.py ./app.py

RUN useradd --create-home --uid 10001 runstream && mkdir /data && chown runstream /data
USER runstream
VOLUME ["/data"]
EXPOSE 4111

HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:4111/health', timeout=2).status != 200)"]

# Socket limits (docs/security.md): read timeouts against slow clients, keep-alive, connections
# (503 past the limit), graceful shutdown under `docker stop`'s 10 s; RUNSTREAM_SERVE_* set the defaults.
CMD ["runstream", "serve", "app:api_runtime", "--host", "0.0.0.0", "--port", "4111", \
     "--header-timeout", "10", "--body-timeout", "30", "--keep-alive", "5", \
     "--limit-concurrency", "1000", "--backlog", "2048", "--graceful-shutdown", "8"]
