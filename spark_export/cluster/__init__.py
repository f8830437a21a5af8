"""Network mode of the `rocketmq` source: read a whole cluster through its name server, batch and streaming.

    spark.read.format("rocketmq").option("nameServer", "h:p").option("topic", "T1,T2").load()

options (ClusterOptions) -> planning (routes, offsets, ranges; driver) -> pull_reader (pulls; executors),
remote (the remoting requests), source (the Spark reader classes).
"""
