# The streams' home on AWS: scripts/serve's process (lib.local.serve) in a container, serving the
# same api/ files and lib/ as every function; the AWS template runs it as an ECS service
# (lib/ops/aws_streams.py, README "Deploying to AWS" for the push to ECR). Build and run:
#   docker build -t ermis-streams .
#   docker run -p 8080:8080 -e DATABASE_URL=… -e CLERK_JWT_KEY=… -e REDIS_URL=… ermis-streams
# The base is pinned to a Python patch release on Debian bookworm's slim variant (pin its digest
# too where your registry allows it). tests/local/test_dockerfile.py runs this file's CMD.
FROM python:3.12.12-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PORT=8080
WORKDIR /app

COPY requirements.txt requirements-serve.txt ./
RUN pip install --no-cache-dir --disable-pip-version-check -r requirements-serve.txt

COPY vercel.json .python-version ./
COPY api ./api
COPY lib ./lib
COPY public ./public
# Bytecode made at build time, as the Vercel build ships it: a new task starts without compiling.
RUN python -m compileall -q api lib \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin ermis
USER ermis

EXPOSE 8080
# No service touched: a task is healthy while it serves, even with the database briefly away.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-m", "lib.local.serve", "--health-check"]
# SIGTERM (ECS stopping a task) ends every open stream with stream.end, then exits; browsers
# reconnect with Last-Event-ID to another task.
STOPSIGNAL SIGTERM
CMD ["python", "-m", "lib.local.serve"]
