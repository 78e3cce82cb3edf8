"""A MovieLens-like joined table: ratings x users (age, gender, occupation) x items (genres as a list, year,
title), with a timestamp and a row id; ratings 1..5 from planted user, item, genre-by-age and genre-by-gender
effects. ``spec draft``'s tests use a small one; benchmarks/bench_spec_draft.py a large one, with HAND_SPEC."""

from __future__ import annotations

import numpy as np
import polars as pl

GENRES = ("Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama", "Fantasy",
          "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western")
AGES = (1, 18, 25, 35, 45, 50, 56)

# what a user who knows the table writes by hand (genres: a Parquet list; as CSV text add `sep: "|"`)
HAND_SPEC = """\
feature_spec:
  rating: {positive_if: ">= 4"}
  user_id: {dtype: int}
  item_id: {dtype: int}
  age: {dtype: int}
  gender: {dtype: str}
  occupation: {dtype: int}
  genres: {dtype: str, hotness: variable, pooling: mean}
  title: {dtype: str}
  year: {}
channel_spec:
  label: [rating]
  numerical: [year]
  categorical: [user_id, item_id, age, gender, occupation, genres, title]
metadata:
  name: movielens-like
"""


def movielens_like(rows: int, users: int = 600, items: int = 400, seed: int = 0, listed: bool = True
                   ) -> pl.DataFrame:
    """``rows`` ratings in time order; ``genres`` a list column (``listed``) or text joined by '|'."""
    rng = np.random.default_rng(seed)
    age = rng.choice(AGES, users)
    gender = rng.choice(["M", "F"], users, p=[0.7, 0.3])
    occupation = rng.integers(0, 21, users)
    n_genres = rng.integers(1, 4, items)
    genres = [sorted(rng.choice(len(GENRES), k, replace=False).tolist()) for k in n_genres]
    year = rng.integers(1930, 2001, items)
    user_bias, item_bias = rng.normal(0, 0.6, users), rng.normal(0, 0.8, items)
    by_age, by_gender = rng.normal(0, 0.6, (len(AGES), len(GENRES))), rng.normal(0, 0.5, (2, len(GENRES)))
    u = np.minimum(rng.zipf(1.3, rows), users) - 1
    i = np.minimum(rng.zipf(1.2, rows), items) - 1
    u, i = rng.permutation(users)[u], rng.permutation(items)[i]
    age_at = np.searchsorted(AGES, age[u])
    male = (gender[u] == "M").astype(int)
    affinity = np.array([by_age[a, g].mean() + by_gender[m, g].mean()
                         for a, m, g in zip(age_at, male, (genres[k] for k in i))])
    score = 3.4 + user_bias[u] + item_bias[i] + affinity + 0.01 * (2000 - year[i]) + rng.normal(0, 0.7, rows)
    rating = np.clip(np.rint(score), 1, 5).astype(np.int64)
    stamp = np.sort(rng.integers(956_703_932, 1_046_454_590, rows))
    names = [[GENRES[g] for g in genres[k]] for k in i]
    return pl.DataFrame({
        "rating_id": np.arange(1, rows + 1, dtype=np.int64), "user_id": u + 1, "item_id": i + 1, "rating": rating,
        "timestamp": stamp, "age": age[u], "gender": gender[u], "occupation": occupation[u],
        "title": [f"Movie {k + 1} ({year[k]})" for k in i], "year": year[i],
        "genres": names if listed else ["|".join(n) for n in names],
    })
