//! [`JetStream`] as a [`Store`]: publish, open, ack, delete and position
//! over the streams, consumers and the id bucket.

use super::*;

impl Store for JetStream {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        let policy = self.policy(topic)?;
        let started = Instant::now();
        self.stream(topic, &policy).await?;
        let (bytes, headers) = match data {
            Payload::Json(raw) => (bytes::Bytes::copy_from_slice(raw.get().as_bytes()), None),
            Payload::Cbor(b) => {
                let mut h = async_nats::HeaderMap::new();
                h.insert(ENCODING_HEADER, "cbor");
                (b.clone(), Some(h))
            }
        };
        let sent = match headers {
            Some(h) => self.js.publish_with_headers(subject(topic), h, bytes).await,
            None => self.js.publish(subject(topic), bytes).await,
        };
        let ack = match sent.map_err(|e| fail("publish", e))?.await {
            Ok(ack) => ack,
            Err(e) => {
                // The stream may have been deleted behind our back: look it
                // up again next time.
                self.streams.lock().remove(topic);
                return Err(fail("publish ack", e));
            }
        };
        self.meters
            .write_seconds
            .observe(started.elapsed().as_secs_f64());
        self.meters.published.inc();
        Ok(Stored {
            topic: topic.to_owned(),
            seq: ack.sequence,
            // The PubAck carries no time; deliveries carry JetStream's.
            stored_at: SystemTime::now(),
            data: data.clone(),
        })
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        let policy = self.policy(topic)?;
        let new = self.claim(id, topic).await?;
        let mut stream = self.stream(topic, &policy).await?;
        let name = consumer_name(id);
        let prior = if new {
            None
        } else {
            match stream.consumer_info(&name).await {
                Ok(info) => Some(info.clone()),
                Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => None,
                Err(e) => return Err(fail("consumer info", e)),
            }
        };
        // `seen`: what the old consumer delivered; `state`: where the
        // subscription started and what was acknowledged above its floor.
        let (floor, seen, state) = match &prior {
            Some(info) => {
                let floor = floor_of(info);
                let seen = info.delivered.stream_sequence.max(floor);
                let state = match acks::load(&self.subs, id).await? {
                    Some(state) => state,
                    // Made before the state was kept: its consumer's start
                    // is the best known.
                    None => AckState {
                        start: start_of(&info.config),
                        acked: Vec::new(),
                    },
                };
                (floor, seen, state)
            }
            None => {
                let last = stream
                    .info()
                    .await
                    .map_err(|e| fail("stream info", e))?
                    .state
                    .last_sequence;
                let state = AckState {
                    start: last + 1,
                    acked: Vec::new(),
                };
                acks::save(&self.subs, id, &state).await?;
                (last, last, state)
            }
        };
        // Recreated from floor + 1, so that every unacknowledged message
        // comes again now, in order.
        self.open.close(id);
        if prior.is_some() {
            setup::delete_consumer(&stream, &name).await?;
        }
        let config = pull::Config {
            durable_name: Some(name),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: floor + 1,
            },
            ack_policy: AckPolicy::Explicit,
            ack_wait: policy.ack_timeout,
            max_ack_pending: i64::try_from(self.window).unwrap_or(i64::MAX),
            filter_subject: subject(topic),
            ..Default::default()
        };
        let consumer = stream
            .create_consumer(config)
            .await
            .map_err(|e| fail("consumer create", e))?;
        let held = Held::new(self.window, state.start, floor, seen, state.acked);
        let deliveries = self.attach(id, topic, consumer, held).await?;
        Ok(Opened {
            resumed_from: floor,
            deliveries,
        })
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        // Acknowledgements go through the instance that holds the id.
        let Some(holding) = self.open.holding(id) else {
            return Err(PersistError::NotFound);
        };
        let take = holding.held.lock().take(seq);
        match take {
            Err(NotHeld::Never) => return Ok(Acked::NeverDelivered),
            Err(NotHeld::Again) => {}
            Err(NotHeld::Owed) => self.save_ack(id, &holding, seq).await?,
            Ok(acker) => {
                if let Err(e) = acker.double_ack().await {
                    holding.held.lock().put_back(seq, acker);
                    return Err(fail("ack", e));
                }
                self.save_ack(id, &holding, seq).await?;
            }
        }
        self.meters.acks.inc();
        Ok(Acked::Yes)
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        self.open.close(id);
        let Some(topic) = self.topic_of(id).await? else {
            return Ok(false);
        };
        // No stream: no consumer either.
        if let Some(stream) = setup::find_stream(&self.js, &topic).await? {
            setup::delete_consumer(&stream, &consumer_name(id)).await?;
        }
        acks::purge(&self.subs, id).await?;
        self.subs
            .purge(hex(id))
            .await
            .map_err(|e| fail("kv purge", e))?;
        Ok(true)
    }
    async fn position(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        self.position_of(id).await
    }

    async fn owned(&self, prefix: &str) -> Result<usize, PersistError> {
        use futures_util::TryStreamExt;
        // The bucket's keys are hex(id) (and `acks.<hex>`, which never
        // starts with a hex digit pair of `[`): the hex of a prefix is a
        // prefix of the hex. One listing per new subscription, of every
        // instance's ids.
        let prefix = hex(prefix);
        let keys = self.subs.keys().await.map_err(|e| fail("kv keys", e))?;
        keys.try_fold(0usize, |n, key| {
            let hit = key.starts_with(&prefix);
            async move { Ok(n + usize::from(hit)) }
        })
        .await
        .map_err(|e| fail("kv keys", e))
    }
}
