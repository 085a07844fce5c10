use super::*;

fn rule(f: impl FnOnce(&mut LifecycleRule)) -> LifecycleRule {
    let mut r = LifecycleRule {
        id: Some("r".into()),
        status: ExpirationStatus::from(ExpirationStatus::ENABLED.to_string()),
        abort_incomplete_multipart_upload: None,
        expiration: Some(LifecycleExpiration {
            days: Some(3),
            ..Default::default()
        }),
        filter: None,
        noncurrent_version_expiration: None,
        noncurrent_version_transitions: None,
        prefix: None,
        transitions: None,
    };
    f(&mut r);
    r
}

fn config(rules: Vec<LifecycleRule>) -> BucketLifecycleConfiguration {
    BucketLifecycleConfiguration { rules }
}

fn code(r: S3Result<Vec<Rule>>) -> String {
    r.unwrap_err().code().as_str().to_string()
}

/// A real day ends at the next midnight UTC; a test day counts exactly.
#[test]
fn days_end_at_midnight_unless_shortened() {
    let real = Clock::with_day_secs(86_400);
    let noon = 10 * DAY_MS + DAY_MS / 2;
    assert_eq!(real.due(noon, 1), 12 * DAY_MS);
    assert_eq!(real.due(10 * DAY_MS, 1), 11 * DAY_MS);
    let short = Clock::with_day_secs(2);
    assert_eq!(short.due(1_000, 3), 7_000);
}

/// Filters need every criterion; rules expire by age, by date, and keep N noncurrent.
#[test]
fn rules_match_and_expire() {
    let rules = from_config(
        &config(vec![rule(|r| {
            r.filter = Some(LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: Some("logs/".into()),
                    tags: Some(vec![Tag {
                        key: Some("k".into()),
                        value: Some("v".into()),
                    }]),
                    object_size_greater_than: Some(10),
                    object_size_less_than: Some(100),
                }),
                ..Default::default()
            });
            r.noncurrent_version_expiration = Some(NoncurrentVersionExpiration {
                noncurrent_days: Some(1),
                newer_noncurrent_versions: Some(2),
            });
        })]),
        &["COLD"],
    )
    .unwrap();
    let r = &rules[0];
    let tags: Tags = [("k".to_string(), "v".to_string())].into();
    assert!(r.filter.matches("logs/a", 50, &tags));
    assert!(!r.filter.matches("data/a", 50, &tags));
    assert!(!r.filter.matches("logs/a", 10, &tags));
    assert!(!r.filter.matches("logs/a", 100, &tags));
    assert!(!r.filter.matches("logs/a", 50, &Tags::new()));
    let c = Clock::with_day_secs(1);
    assert!(!r.current_expired(c, 0, 2_999));
    assert!(r.current_expired(c, 0, 3_000));
    assert!(
        !r.noncurrent_expired(c, 0, 1, 5_000),
        "one of the two newest kept"
    );
    assert!(r.noncurrent_expired(c, 0, 2, 5_000));
    assert!(!r.noncurrent_expired(c, 0, 2, 999));
    // Round trip through the document keeps the rule.
    assert_eq!(
        from_config(&config(to_config(&rules)), &["COLD"]).unwrap(),
        rules
    );
}

/// Malformed and unsupported documents are refused with S3's codes.
#[test]
fn bad_documents_are_refused() {
    assert_eq!(
        code(from_config(&config(vec![]), &["COLD"])),
        "MalformedXML"
    );
    let both = rule(|r| {
        r.prefix = Some("a".into());
        r.filter = Some(LifecycleRuleFilter::default());
    });
    assert_eq!(
        code(from_config(&config(vec![both]), &["COLD"])),
        "MalformedXML"
    );
    let no_action = rule(|r| r.expiration = None);
    assert_eq!(
        code(from_config(&config(vec![no_action]), &["COLD"])),
        "MalformedXML"
    );
    let zero = rule(|r| r.expiration.as_mut().unwrap().days = Some(0));
    assert_eq!(
        code(from_config(&config(vec![zero]), &["COLD"])),
        "InvalidArgument"
    );
    let twice = vec![rule(|_| {}), rule(|_| {})];
    assert_eq!(
        code(from_config(&config(twice), &["COLD"])),
        "InvalidArgument"
    );
    let to = |days: Option<i32>, class: Option<&str>| s3s::dto::Transition {
        days,
        date: None,
        storage_class: class.map(|c| TransitionStorageClass::from(c.to_string())),
    };
    for (ts, want) in [
        (vec![to(Some(1), Some("GLACIER"))], "InvalidStorageClass"),
        (vec![to(Some(1), Some("STANDARD"))], "InvalidStorageClass"),
        (vec![to(Some(1), None)], "MalformedXML"),
        (vec![to(None, Some("COLD"))], "MalformedXML"),
        (vec![to(Some(-1), Some("COLD"))], "InvalidArgument"),
        (vec![to(Some(5), Some("COLD"))], "InvalidArgument"),
        (
            vec![to(Some(1), Some("COLD")), to(Some(2), Some("COLD"))],
            "InvalidArgument",
        ),
    ] {
        let t = rule(|r| r.transitions = Some(ts.clone()));
        assert_eq!(
            code(from_config(&config(vec![t]), &["COLD"])),
            want,
            "{ts:?}"
        );
    }
    let nc = rule(|r| {
        r.noncurrent_version_transitions = Some(vec![NoncurrentVersionTransition {
            noncurrent_days: None,
            newer_noncurrent_versions: None,
            storage_class: Some(TransitionStorageClass::from("COLD".to_string())),
        }])
    });
    assert_eq!(
        code(from_config(&config(vec![nc]), &["COLD"])),
        "MalformedXML"
    );
    let marker_and_days = rule(|r| {
        r.expiration.as_mut().unwrap().expired_object_delete_marker = Some(true);
    });
    assert_eq!(
        code(from_config(&config(vec![marker_and_days]), &["COLD"])),
        "MalformedXML"
    );
    let status = rule(|r| r.status = ExpirationStatus::from("On".to_string()));
    assert_eq!(
        code(from_config(&config(vec![status]), &["COLD"])),
        "MalformedXML"
    );
    let not_midnight = rule(|r| {
        r.expiration = Some(LifecycleExpiration {
            date: Some(crate::headers::timestamp(DAY_MS + 1000)),
            ..Default::default()
        })
    });
    assert_eq!(
        code(from_config(&config(vec![not_midnight]), &["COLD"])),
        "InvalidArgument"
    );
    let legacy = from_config(
        &config(vec![rule(|r| r.prefix = Some("p/".into()))]),
        &["COLD"],
    )
    .unwrap();
    assert!(legacy[0].filter.legacy);
    assert_eq!(to_config(&legacy)[0].prefix.as_deref(), Some("p/"));
}

/// Uploads are aborted by age within the rule's prefix.
#[test]
fn uploads_expire_by_prefix_and_age() {
    let rules = from_config(
        &config(vec![rule(|r| {
            r.expiration = None;
            r.filter = Some(LifecycleRuleFilter {
                prefix: Some("tmp/".into()),
                ..Default::default()
            });
            r.abort_incomplete_multipart_upload = Some(AbortIncompleteMultipartUpload {
                days_after_initiation: Some(2),
            });
        })]),
        &["COLD"],
    )
    .unwrap();
    let c = Clock::with_day_secs(1);
    assert!(rules[0].upload_expired(c, "tmp/x", 0, 2_000));
    assert!(!rules[0].upload_expired(c, "tmp/x", 0, 1_999));
    assert!(!rules[0].upload_expired(c, "x", 0, 9_000));
}

/// Transitions: the latest due one wins, noncurrent ones keep the newest N, and both survive
/// a round trip through the S3 document.
#[test]
fn transitions_come_due_and_round_trip() {
    let rules = from_config(
        &config(vec![rule(|r| {
            r.expiration = Some(LifecycleExpiration {
                days: Some(30),
                ..Default::default()
            });
            r.transitions = Some(vec![
                s3s::dto::Transition {
                    days: Some(0),
                    date: None,
                    storage_class: Some(TransitionStorageClass::from("WARM".to_string())),
                },
                s3s::dto::Transition {
                    days: Some(10),
                    date: None,
                    storage_class: Some(TransitionStorageClass::from("COLD".to_string())),
                },
            ]);
            r.noncurrent_version_transitions = Some(vec![NoncurrentVersionTransition {
                noncurrent_days: Some(2),
                newer_noncurrent_versions: Some(1),
                storage_class: Some(TransitionStorageClass::from("COLD".to_string())),
            }]);
        })]),
        &["COLD", "WARM"],
    )
    .unwrap();
    let r = &rules[0];
    let clock = Clock::with_day_secs(1);
    assert_eq!(r.current_class(clock, 0, 0), Some((0, "WARM")));
    assert_eq!(r.current_class(clock, 0, 9_999), Some((0, "WARM")));
    assert_eq!(r.current_class(clock, 0, 10_000), Some((10_000, "COLD")));
    assert_eq!(r.current_class(clock, 5_000, 10_000), Some((5_000, "WARM")));
    assert_eq!(
        r.noncurrent_class(clock, 0, 0, 5_000),
        None,
        "the newest is kept"
    );
    assert_eq!(r.noncurrent_class(clock, 0, 1, 1_999), None);
    assert_eq!(
        r.noncurrent_class(clock, 0, 1, 2_000),
        Some((2_000, "COLD"))
    );
    assert_eq!(
        from_config(&config(to_config(&rules)), &["COLD", "WARM"]).unwrap(),
        rules
    );
}
