# pyrocketmq-broker: the broker plus its embedded name server in one container.
#   docker build -t pyrocketmq-broker .
#   docker run -p 9876:9876 -p 10911:10911 -p 127.0.0.1:8082:8082 -v rmqstore:/var/lib/rocketmq/store pyrocketmq-broker
# The web console listens on 0.0.0.0:8082 inside the container (its loopback is not reachable from the host):
# publish it on the host's loopback as above, or turn ACL on before publishing it further.
# Clients reach the broker at the address it registers in routes (brokerIP1). The shipped conf says
# 127.0.0.1, which works for clients on the Docker host with the ports published as above; for clients
# elsewhere, mount a conf with brokerIP1=<reachable address> over /etc/broker/broker.conf.
# The HEALTHCHECK probes listenPort 10911; change it too if you change listenPort.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/pyrocketmq
COPY pyproject.toml setup.py README.md ./
COPY protocol ./protocol
COPY broker ./broker
COPY client ./client
COPY spark_export ./spark_export
RUN pip install . && rm -rf /opt/pyrocketmq/build

# The shipped broker.conf, with the store moved to the container's data volume.
COPY conf/broker.conf /etc/broker/broker.conf
RUN sed -i -E '/^[[:space:]]*(storePathRootDir|storePathCommitLog|dashboardHost)([[:space:]]*[=:]|[[:space:]])/d' /etc/broker/broker.conf \
    && printf '\nstorePathRootDir=/var/lib/rocketmq/store\ndashboardHost=0.0.0.0\n' >> /etc/broker/broker.conf \
    && useradd --system --uid 10001 --home-dir /var/lib/rocketmq rocketmq \
    && mkdir -p /var/lib/rocketmq/store \
    && chown -R rocketmq:rocketmq /var/lib/rocketmq

USER rocketmq
WORKDIR /var/lib/rocketmq
VOLUME ["/var/lib/rocketmq/store"]
EXPOSE 9876 10909 10911 10912 8081 8082

HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import socket; socket.create_connection(('127.0.0.1', 10911), 2).close()"]

CMD ["mqbroker", "-c", "/etc/broker/broker.conf"]
